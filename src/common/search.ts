/** The first index in `[0, n)` where `atOrAfter` holds, `n` when none does (it holds from some index on). */
export function firstAtOrAfter(n: number, atOrAfter: (i: number) => boolean): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (atOrAfter(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
