/**
 * A bounded map that forgets first a key not used since the last sweep (CLOCK, the usual cheap approximation of
 * least-recently-used): a hit only marks its entry, so the hot path never reorders the map.
 */
export class Lru<K, V> {
  private readonly map = new Map<K, { value: V; used: boolean }>();
  constructor(private readonly max: number) {}

  /** The value of `key`, marked as used. */
  get(key: K): V | undefined {
    const e = this.map.get(key);
    if (e === undefined) return undefined;
    e.used = true;
    return e.value;
  }

  /** Stores `value`, dropping keys beyond the bound: the oldest not used since it was stored or last passed over. */
  set(key: K, value: V): void {
    const e = this.map.get(key);
    if (e !== undefined) {
      e.value = value;
      e.used = true;
      return;
    }
    this.map.set(key, { value, used: false });
    while (this.map.size > this.max) this.evictOne();
  }

  delete(key: K): boolean {
    return this.map.delete(key);
  }

  clear(): void {
    this.map.clear();
  }

  get size(): number {
    return this.map.size;
  }

  /** Drops the oldest unused entry; a used one passed over loses its mark and goes to the recent end (a second chance). */
  private evictOne(): void {
    for (const [k, e] of this.map) {
      this.map.delete(k);
      if (!e.used) return;
      e.used = false;
      this.map.set(k, e);
    }
  }
}
