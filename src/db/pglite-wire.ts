/**
 * postgres.js straight into PGlite, without a TCP socket: a socket-like object (postgres.js's `socket` option) that
 * cuts what postgres.js writes into protocol messages and runs each through PGlite, as @electric-sql/pglite-socket
 * does behind its loopback port, minus the two socket hops per message and that server's re-copying of its whole
 * input buffer for every chunk a large message arrives in (a batch's bulk insert is one message of ~1 MB).
 */
import type { PGlite } from "@electric-sql/pglite";
import { EventEmitter } from "node:events";

// The startup message has no type byte: its length, then the protocol version 3.0.
const PROTOCOL_3 = 196_608;

/** One connection's end: postgres.js writes messages, PGlite's answers come back as `data` events. */
class PgliteWire extends EventEmitter {
  readyState: "open" | "closed" = "open";
  private pending: Buffer = Buffer.alloc(0);
  private chunks: Buffer[] = [];
  private queued = 0;
  private started = false;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly pg: PGlite) {
    super();
  }

  write(chunk: Uint8Array, cb?: (err?: Error | null) => void): boolean {
    if (this.readyState === "open") {
      this.chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      this.queued += chunk.byteLength;
      for (const message of this.messages()) this.running = this.running.then(() => this.run(message));
    }
    if (cb) queueMicrotask(() => cb(null));
    return true;
  }

  /** The complete messages written so far (a message may span writes, a write may hold several). */
  private messages(): Buffer[] {
    // One concatenation per write at most, of what is still incomplete: never the whole stream again.
    const buf =
      this.chunks.length === 1 && this.pending.length === 0
        ? this.chunks[0]!
        : Buffer.concat([this.pending, ...this.chunks], this.pending.length + this.queued);
    this.chunks = [];
    this.queued = 0;
    const out: Buffer[] = [];
    let at = 0;
    for (;;) {
      let size: number;
      if (!this.started) {
        if (buf.length - at < 8) break;
        if (buf.readInt32BE(at + 4) !== PROTOCOL_3) throw new Error("pglite wire: expected a startup message");
        size = buf.readInt32BE(at);
      } else {
        if (buf.length - at < 5) break;
        size = 1 + buf.readInt32BE(at + 1);
      }
      if (buf.length - at < size) break;
      out.push(buf.subarray(at, at + size));
      at += size;
      this.started = true;
    }
    this.pending = at === buf.length ? Buffer.alloc(0) : Buffer.from(buf.subarray(at));
    return out;
  }

  private async run(message: Buffer): Promise<void> {
    if (this.readyState !== "open") return;
    if (message[0] === 0x58 /* X: Terminate */) return this.close();
    const answer: Buffer[] = [];
    try {
      await this.pg.runExclusive(() =>
        this.pg.execProtocolRawStream(message, { onRawData: (data) => answer.push(Buffer.from(data)) }),
      );
    } catch (err) {
      this.emit("error", err);
      return this.close();
    }
    if (answer.length > 0 && this.readyState === "open") {
      this.emit("data", answer.length === 1 ? answer[0] : Buffer.concat(answer));
    }
  }

  end(data?: Uint8Array): void {
    if (data) this.write(data);
    this.running = this.running.then(() => this.close());
  }

  destroy(): void {
    void this.close();
  }

  private async close(): Promise<void> {
    if (this.readyState === "closed") return;
    this.readyState = "closed";
    // PGlite is one session: a transaction left open by this connection would be the next one's.
    try {
      if (!this.pg.closed && this.pg.isInTransaction()) await this.pg.exec("rollback");
    } catch {
      // the database is closing
    }
    queueMicrotask(() => this.emit("close", false));
  }

  pause(): void {}
  resume(): void {}
  setKeepAlive(): void {}
}

/** postgres.js's `socket` option for a PGlite instance: every connection is a {@link PgliteWire}. */
export function pgliteSocket(pg: PGlite): () => PgliteWire {
  return () => new PgliteWire(pg);
}
