/** Helpers for tests of streamed lists. */

/**
 * Takes at most `max` items of `items`: "ended" when it ended first, the error it threw first, or a message saying
 * it was still going (a stream that would repeat rows without end must not hang the test).
 */
export async function drainUpTo(items: AsyncIterable<unknown>, max = 50): Promise<unknown> {
  let taken = 0;
  try {
    for await (const _ of items) if (++taken >= max) return `still going after ${taken} items`;
    return "ended";
  } catch (err) {
    return err;
  }
}
