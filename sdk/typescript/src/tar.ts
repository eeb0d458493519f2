/**
 * Tar streams for uploading and downloading directory trees, written here
 * so the SDK takes no dependencies. The guest's GET /files/archive?path=P
 * names a directory's entries relative to P; PUT /files/archive?path=P
 * extracts a tar under P. Uploads are streamed as they are read (ustar,
 * with PAX records for long names); downloads are extracted entry by entry,
 * refusing any entry that would land outside the destination.
 */
import { createReadStream } from "node:fs";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import { InvalidArgumentError } from "./errors.js";

const BLOCK = 512;

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function header(name: string, type: string, size: number, mode: number, mtime: number, link = ""): Buffer {
  const pax: string[] = [];
  const put = (k: string, v: string) => {
    // A record is "<len> <key>=<value>\n", its length counting itself.
    const body = ` ${k}=${v}\n`;
    let len = Buffer.byteLength(body) + 1;
    while (String(len).length + Buffer.byteLength(body) !== len) len++;
    pax.push(len + body);
  };
  if (Buffer.byteLength(name) > 99) put("path", name);
  if (Buffer.byteLength(link) > 99) put("linkpath", link);
  const out: Buffer[] = [];
  if (pax.length) {
    const data = Buffer.from(pax.join(""));
    out.push(rawHeader("PaxHeaders/" + name.slice(-80), "x", data.length, 0o644, mtime, ""));
    out.push(data, Buffer.alloc(pad(data.length)));
  }
  out.push(rawHeader(name, type, size, mode, mtime, link));
  return Buffer.concat(out);
}

function rawHeader(name: string, type: string, size: number, mode: number, mtime: number, link: string): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(truncate(name, 100), 0, "utf8");
  h.write(octal(mode & 0o7777, 8), 100, "ascii");
  h.write(octal(0, 8), 108, "ascii");
  h.write(octal(0, 8), 116, "ascii");
  h.write(octal(size, 12), 124, "ascii");
  h.write(octal(Math.floor(mtime), 12), 136, "ascii");
  h.write("        ", 148, "ascii");
  h.write(type, 156, "ascii");
  h.write(truncate(link, 100), 157, "utf8");
  h.write("ustar\0" + "00", 257, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(octal(sum, 7) + " ", 148, "ascii");
  return h;
}

function truncate(s: string, max: number): string {
  let b = Buffer.from(s);
  if (b.length <= max) return s;
  b = b.subarray(0, max);
  return b.toString("utf8").replace(/\uFFFD$/, "");
}

function pad(n: number): number {
  return (BLOCK - (n % BLOCK)) % BLOCK;
}

/** A tar of localDir's content (entries relative to it), as it is read. */
export async function* packDir(localDir: string): AsyncGenerator<Buffer> {
  async function* walk(dir: string, rel: string): AsyncGenerator<Buffer> {
    const names = (await fs.readdir(dir)).sort();
    for (const n of names) {
      const full = path.join(dir, n);
      const name = rel ? rel + "/" + n : n;
      const st = await fs.lstat(full);
      const mtime = st.mtimeMs / 1000;
      if (st.isDirectory()) {
        yield header(name + "/", "5", 0, st.mode, mtime);
        yield* walk(full, name);
      } else if (st.isSymbolicLink()) {
        yield header(name, "2", 0, st.mode, mtime, await fs.readlink(full));
      } else if (st.isFile()) {
        yield header(name, "0", st.size, st.mode, mtime);
        let sent = 0;
        if (st.size > 0) {
          for await (const chunk of createReadStream(full, { end: st.size - 1 })) {
            sent += (chunk as Buffer).length;
            yield chunk as Buffer;
          }
        }
        if (sent !== st.size) {
          throw new InvalidArgumentError(`${full} changed size while it was uploaded`);
        }
        if (pad(st.size)) yield Buffer.alloc(pad(st.size));
      }
    }
  }
  yield* walk(localDir, "");
  yield Buffer.alloc(2 * BLOCK);
}

/** Reads exact byte counts from a stream of chunks. */
class ByteReader {
  private buf: Buffer = Buffer.alloc(0);
  private it: AsyncIterator<Buffer>;
  private done = false;
  constructor(src: AsyncIterable<Buffer>) {
    this.it = src[Symbol.asyncIterator]();
  }
  /** n bytes, or fewer at the stream's end. */
  async read(n: number): Promise<Buffer> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : r.value;
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(out.length);
    return out;
  }
}

function field(h: Buffer, off: number, len: number): string {
  const s = h.subarray(off, off + len);
  const z = s.indexOf(0);
  return (z >= 0 ? s.subarray(0, z) : s).toString("utf8");
}

function num(h: Buffer, off: number, len: number): number {
  if (h[off] & 0x80) {
    // base-256, for sizes over 8 GiB
    let n = 0;
    for (let i = off + 1; i < off + len; i++) n = n * 256 + h[i];
    return n;
  }
  const t = field(h, off, len).trim();
  return t ? parseInt(t, 8) : 0;
}

function parsePax(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(32, i);
    if (sp < 0) break;
    const len = parseInt(data.subarray(i, sp).toString("ascii"), 10);
    if (!(len > 0)) break;
    const rec = data.subarray(sp + 1, i + len - 1).toString("utf8");
    const eq = rec.indexOf("=");
    if (eq > 0) out[rec.slice(0, eq)] = rec.slice(eq + 1);
    i += len;
  }
  return out;
}

async function inside(root: string, rel: string): Promise<string> {
  const joined = path.join(root, rel);
  await fs.mkdir(joined, { recursive: true });
  const dest = await fs.realpath(joined);
  if (dest !== root && !dest.startsWith(root + path.sep)) {
    throw new InvalidArgumentError(`archive entry ${JSON.stringify(rel)} would land outside ${root}; refusing it`);
  }
  return dest;
}

async function lexists(p: string): Promise<import("node:fs").Stats | undefined> {
  try {
    return await fs.lstat(p);
  } catch {
    return undefined;
  }
}

/**
 * Extract the tar in src under localDir (created if missing). Files,
 * directories, symlinks and hard links (to names inside the tree) are
 * made; other kinds are skipped. No entry is written through a symlink to
 * outside localDir.
 */
export async function extract(src: AsyncIterable<Buffer>, localDir: string): Promise<void> {
  await fs.mkdir(localDir, { recursive: true });
  const root = await fs.realpath(localDir);
  const r = new ByteReader(src);
  let next: Record<string, string> = {};
  for (;;) {
    const h = await r.read(BLOCK);
    if (h.length < BLOCK || h.every((b) => b === 0)) return;
    const type = String.fromCharCode(h[156] || 48);
    let name = field(h, 0, 100);
    const prefix = field(h, 345, 155);
    if (prefix) name = prefix + "/" + name;
    let link = field(h, 157, 100);
    let size = num(h, 124, 12);
    const mode = num(h, 100, 8);
    if (next.path !== undefined) name = next.path;
    if (next.linkpath !== undefined) link = next.linkpath;
    if (next.size !== undefined) size = Number(next.size);
    const meta = type === "x" || type === "g" || type === "L" || type === "K";
    if (meta) {
      const data = await r.read(size);
      await r.read(pad(size));
      if (type === "x") next = { ...next, ...parsePax(data) };
      else if (type === "L") next = { ...next, path: field(data, 0, data.length) };
      else if (type === "K") next = { ...next, linkpath: field(data, 0, data.length) };
      continue;
    }
    next = {};
    const clean = name.replace(/^\/+/, "").replace(/\/+$/, "");
    if (!clean || clean === ".") {
      await skip(r, type === "0" || type === "\0" || type === "7" ? size : 0);
      continue;
    }
    if (name.startsWith("/") || clean.split("/").includes("..")) {
      throw new InvalidArgumentError(`archive entry ${JSON.stringify(name)} is not a relative path inside the tree`);
    }
    const parent = await inside(root, path.dirname(clean));
    // The last component is never followed: a link there is replaced.
    const dest = path.join(parent, path.basename(clean));
    const old = await lexists(dest);
    if (type === "5") {
      if (old && !old.isDirectory()) await fs.rm(dest, { recursive: true });
      await fs.mkdir(dest, { recursive: true });
      await fs.chmod(dest, (mode & 0o777) | 0o700);
    } else if (type === "0" || type === "\0" || type === "7") {
      if (old && !old.isDirectory()) await fs.unlink(dest);
      const fh = await fs.open(dest, "w", 0o600);
      try {
        let left = size;
        while (left > 0) {
          const c = await r.read(Math.min(left, 256 << 10));
          if (c.length === 0) throw new InvalidArgumentError("the archive ended inside a file");
          await fh.write(c);
          left -= c.length;
        }
      } finally {
        await fh.close();
      }
      await r.read(pad(size));
      await fs.chmod(dest, mode & 0o777);
    } else if (type === "2") {
      if (old) await fs.rm(dest, { recursive: true });
      // Any target is kept as is: later entries are placed by real paths
      // checked against the root, so a link cannot carry them outside.
      await fs.symlink(link, dest);
    } else if (type === "1") {
      const target = link.replace(/^\/+/, "");
      if (link.startsWith("/") || target.split("/").includes("..")) {
        throw new InvalidArgumentError(`archive hard link ${JSON.stringify(link)} points outside the tree`);
      }
      const srcPath = path.join(await inside(root, path.dirname(target)), path.basename(target));
      if (old) await fs.rm(dest, { recursive: true });
      await fs.copyFile(srcPath, dest);
    } else {
      await skip(r, size);
    }
  }
}

async function skip(r: ByteReader, size: number): Promise<void> {
  let left = size + pad(size);
  while (left > 0) {
    const c = await r.read(Math.min(left, 256 << 10));
    if (c.length === 0) return;
    left -= c.length;
  }
}
