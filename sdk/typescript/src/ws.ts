/**
 * A small WebSocket client (RFC 6455) over node:http's upgrade, for the
 * terminal's socket: Node 18 and 20 have no WebSocket of their own, and the
 * SDK takes no dependencies. It speaks what the daemon's PTY route needs:
 * text and binary messages (fragmented or not), ping, pong and close.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Duplex } from "node:stream";
import { apiError, readAll, throwIfAborted, transportError, type Http } from "./http.js";
import { AgentboxError } from "./errors.js";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

export interface WsMessage {
  binary: boolean;
  data: Buffer;
}

export class WebSocketConn {
  private buf: Buffer = Buffer.alloc(0);
  private frag: Buffer[] = [];
  private fragBinary = false;
  private queue: WsMessage[] = [];
  private waiters: Array<(m: WsMessage | null) => void> = [];
  private closed = false;
  private sentClose = false;

  private constructor(private readonly sock: Duplex) {
    sock.on("data", (d: Buffer) => this.feed(d));
    sock.on("close", () => this.finish());
    sock.on("end", () => this.finish());
    sock.on("error", () => this.finish());
  }

  /** Open the WebSocket at path on the daemon. */
  static open(h: Http, path: string, signal?: AbortSignal): Promise<WebSocketConn> {
    throwIfAborted(signal);
    const { mod, options } = h.requestOptions("GET", path);
    const key = randomBytes(16).toString("base64");
    const headers = options.headers as Record<string, string>;
    delete headers.Accept;
    Object.assign(headers, {
      Connection: "Upgrade",
      Upgrade: "websocket",
      "Sec-WebSocket-Version": "13",
      "Sec-WebSocket-Key": key,
    });
    options.signal = signal;
    return new Promise((resolve, reject) => {
      const req = mod.request(options);
      req.on("upgrade", (res, sock, head) => {
        const want = createHash("sha1").update(key + GUID).digest("base64");
        if (res.headers["sec-websocket-accept"] !== want) {
          sock.destroy();
          reject(new AgentboxError(`the daemon's WebSocket answer at ${path} has a wrong accept key`, "internal"));
          return;
        }
        const ws = new WebSocketConn(sock);
        if (head.length) ws.feed(head);
        resolve(ws);
      });
      req.on("response", (res) => {
        readAll(res).then(
          (b) => reject(apiError(h.cfg, res.statusCode ?? 0, b)),
          (e) => reject(transportError(h.cfg, e, signal)),
        );
      });
      req.on("error", (e) => reject(transportError(h.cfg, e, signal)));
      req.end();
    });
  }

  /** The next message, or null once the connection is closed. */
  next(signal?: AbortSignal): Promise<WsMessage | null> {
    throwIfAborted(signal);
    const m = this.queue.shift();
    if (m) return Promise.resolve(m);
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(signal!.reason);
      };
      const waiter = (m: WsMessage | null) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(m);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Send a text (string) or binary (bytes) message. */
  send(data: string | Uint8Array): Promise<void> {
    if (this.closed || this.sentClose) {
      return Promise.reject(new AgentboxError("the terminal is closed", "failed_precondition"));
    }
    const binary = typeof data !== "string";
    return this.frame(binary ? 2 : 1, Buffer.from(data as Uint8Array));
  }

  /** Close the connection (a close frame, then the socket). */
  async close(): Promise<void> {
    if (!this.closed && !this.sentClose) {
      const code = Buffer.alloc(2);
      code.writeUInt16BE(1000);
      await this.frame(8, code).catch(() => {});
      this.sentClose = true;
    }
    this.sock.end();
    if (!this.closed) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.sock.destroy();
          resolve();
        }, 2000);
        this.sock.once("close", () => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    this.finish();
  }

  private frame(opcode: number, payload: Buffer): Promise<void> {
    const mask = randomBytes(4);
    let head: Buffer;
    if (payload.length < 126) {
      head = Buffer.from([0x80 | opcode, 0x80 | payload.length]);
    } else if (payload.length < 65536) {
      head = Buffer.alloc(4);
      head[0] = 0x80 | opcode;
      head[1] = 0x80 | 126;
      head.writeUInt16BE(payload.length, 2);
    } else {
      head = Buffer.alloc(10);
      head[0] = 0x80 | opcode;
      head[1] = 0x80 | 127;
      head.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    const body = Buffer.alloc(payload.length);
    for (let i = 0; i < payload.length; i++) body[i] = payload[i] ^ mask[i & 3];
    return new Promise((resolve, reject) => {
      this.sock.write(Buffer.concat([head, mask, body]), (e) => (e ? reject(e) : resolve()));
    });
  }

  private feed(d: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0];
      const b1 = this.buf[1];
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      const maskKey = masked ? this.buf.subarray(off, off + 4) : undefined;
      if (masked) off += 4;
      if (this.buf.length < off + len) return;
      const payload = Buffer.from(this.buf.subarray(off, off + len));
      if (maskKey) for (let i = 0; i < payload.length; i++) payload[i] ^= maskKey[i & 3];
      this.buf = this.buf.subarray(off + len);
      this.handle(b0 & 0x80 ? true : false, b0 & 0x0f, payload);
    }
  }

  private handle(fin: boolean, opcode: number, payload: Buffer): void {
    switch (opcode) {
      case 0x0: // continuation
        this.frag.push(payload);
        if (fin) {
          this.deliver({ binary: this.fragBinary, data: Buffer.concat(this.frag) });
          this.frag = [];
        }
        return;
      case 0x1:
      case 0x2:
        if (fin) {
          this.deliver({ binary: opcode === 2, data: payload });
        } else {
          this.frag = [payload];
          this.fragBinary = opcode === 2;
        }
        return;
      case 0x8: // close: answer it, then the server closes the socket
        if (!this.sentClose) {
          this.sentClose = true;
          this.frame(8, payload.subarray(0, 2)).catch(() => {});
        }
        this.sock.end();
        return;
      case 0x9: // ping
        if (!this.sentClose) this.frame(0xa, payload).catch(() => {});
        return;
      default: // pong and unknown control frames
        return;
    }
  }

  private deliver(m: WsMessage): void {
    const w = this.waiters.shift();
    if (w) w(m);
    else this.queue.push(m);
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.waiters.splice(0)) w(null);
  }
}
