/** A bounded map that forgets its least recently used key first. */
export class Lru<K, V> {
  private readonly map = new Map<K, V>();
  constructor(private readonly max: number) {}

  /** The value of `key`, marked as the most recently used. */
  get(key: K): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      // Map order is insertion order: re-inserting moves the key to the most recent end.
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  /** Stores `value`, dropping the least recently used keys beyond the bound. */
  set(key: K, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value as K);
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
}
