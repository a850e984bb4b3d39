import { UnavailableError } from "./errors";

/** Deadline of the hot, indexed queries (lookups that take a millisecond when healthy). */
export const DEADLINE_FAST_MS = 2_000;
/** Deadline of list queries, which may legitimately return many rows. */
export const DEADLINE_LIST_MS = 30_000;

/**
 * Runs a postgres.js query with a deadline: past it the query is cancelled and the request gets a 503
 * (a hung database must not hold requests for the TCP timeout).
 */
export async function withDeadline<T>(query: PromiseLike<T> & { cancel?: () => unknown }, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      try {
        query.cancel?.();
      } catch {
        // cancelling a query that never started can throw; the 503 stands either way
      }
      reject(new UnavailableError("the database did not answer in time, retry shortly"));
    }, ms);
  });
  try {
    return await Promise.race([query, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
