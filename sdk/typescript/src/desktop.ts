/**
 * The desktop of a sandbox for computer-use agents (docs/desktop.md): an X
 * display the agent sees in screenshots and drives with mouse and
 * keyboard, and a live view for humans.
 */
import { InvalidArgumentError } from "./errors.js";
import { Http, readAll, sandboxPath, transportError, type CallOptions } from "./http.js";
import * as m from "./models.js";

/** The display's state (`GET /desktop`). */
export interface DesktopInfo {
  /** stopped, starting, running or failed. */
  state: string;
  display?: string;
  width?: number;
  height?: number;
  dpi?: number;
  streamPort?: number;
  startedAt?: Date;
  /** Why the desktop failed, with the failing piece's last stderr lines. */
  error?: string;
  /** The pids of the desktop's pieces by name (x, wm, vnc). */
  processes: Record<string, number>;
}

/** A screen position in pixels. */
export interface Point {
  x: number;
  y: number;
}

/** A screenshot: the image and the sizes of the image and the screen. */
export interface Screenshot {
  format: "png" | "jpeg";
  data: Buffer;
  width: number;
  height: number;
  screenWidth: number;
  screenHeight: number;
}

/** How to take a screenshot. */
export interface ScreenshotOptions {
  /** png (the default) or jpeg. */
  format?: "png" | "jpeg";
  /** JPEG quality, 1-100 (default 80). */
  quality?: number;
  /** "WxH" or a factor such as 0.5. */
  scale?: string | number;
  /** A rectangle of the screen, in screen pixels. */
  region?: { x: number; y: number; w: number; h: number };
}

/**
 * One step of `actions()`, as the API takes it (`type` picks the fields
 * that count): move {x,y}; click {x?,y?,button?,double?}; mouse_down /
 * mouse_up {button?, x?, y?}; drag {path}; scroll {x?,y?,dx,dy}; type
 * {text}; key {keys: "ctrl+l"}; wait {ms}.
 */
export interface DesktopAction {
  type: "move" | "click" | "mouse_down" | "mouse_up" | "drag" | "scroll" | "type" | "key" | "wait";
  x?: number;
  y?: number;
  button?: "left" | "right" | "middle" | "back" | "forward";
  double?: boolean;
  path?: Point[];
  dx?: number;
  dy?: number;
  text?: string;
  keys?: string;
  ms?: number;
}

/** What `actions()` answers: the pointer, and the screenshot when asked. */
export interface ActionsResult {
  cursor: Point;
  screenshot?: Screenshot;
}

/** A top-level window of the display. */
export interface Window {
  id: number;
  title: string;
  app?: string;
  pid?: number;
  x: number;
  y: number;
  width: number;
  height: number;
  focused: boolean;
}

function desktopInfo(d: any): DesktopInfo {
  return {
    state: d?.state ?? "stopped",
    display: d?.display,
    width: d?.width,
    height: d?.height,
    dpi: d?.dpi,
    streamPort: d?.stream_port,
    startedAt: m.time(d?.started_at),
    error: d?.error,
    processes: d?.processes ?? {},
  };
}

function screenshotQuery(o: ScreenshotOptions): Record<string, string | undefined> {
  const q: Record<string, string | undefined> = {};
  if (o.format) q.format = o.format;
  if (o.quality !== undefined) q.quality = String(o.quality);
  if (o.scale !== undefined) q.scale = String(o.scale);
  if (o.region) {
    q.x = String(o.region.x);
    q.y = String(o.region.y);
    q.w = String(o.region.w);
    q.h = String(o.region.h);
  }
  return q;
}

function screenshotBody(o: ScreenshotOptions): any {
  const b: any = {};
  if (o.format) b.format = o.format;
  if (o.quality !== undefined) b.quality = o.quality;
  if (o.scale !== undefined) b.scale = String(o.scale);
  if (o.region) b.region = o.region;
  return b;
}

/** A sandbox's desktop: `sbx.desktop`. */
export class Desktop {
  constructor(
    private readonly http: Http,
    private readonly sandboxId: string,
  ) {}

  private path(rest = ""): string {
    return sandboxPath(this.sandboxId, "/desktop" + rest);
  }

  /**
   * Start the display (Xvfb, a window manager, x11vnc), by default
   * 1024x768 at 96 dpi, and resolve once it runs. Starting a running
   * desktop of the same size does nothing.
   */
  async start(opts: CallOptions & { width?: number; height?: number; dpi?: number } = {}): Promise<DesktopInfo> {
    const json: any = {};
    if (opts.width !== undefined) json.width = opts.width;
    if (opts.height !== undefined) json.height = opts.height;
    if (opts.dpi !== undefined) json.dpi = opts.dpi;
    return desktopInfo(await this.http.json("POST", this.path(), { json, signal: opts.signal }));
  }

  /** The display's state. */
  async status(opts: CallOptions = {}): Promise<DesktopInfo> {
    return desktopInfo(await this.http.json("GET", this.path(), { signal: opts.signal }));
  }

  /** Stop the display and the programs started on it. */
  async stop(opts: CallOptions = {}): Promise<void> {
    await this.http.send("DELETE", this.path(), { signal: opts.signal });
  }

  /** A screenshot: PNG by default, JPEG, scaled, or of a region. */
  async screenshot(opts: CallOptions & ScreenshotOptions = {}): Promise<Screenshot> {
    const res = await this.http.open("GET", this.path("/screenshot"), {
      query: screenshotQuery(opts),
      headers: { Accept: "image/png, image/jpeg, application/json" },
      signal: opts.signal,
    });
    let data: Buffer;
    try {
      data = await readAll(res);
    } catch (e) {
      throw transportError(this.http.cfg, e, opts.signal);
    }
    const n = (h: string) => Number(res.headers[h] ?? 0);
    return {
      format: res.headers["content-type"] === "image/jpeg" ? "jpeg" : "png",
      data,
      width: n("x-image-width"),
      height: n("x-image-height"),
      screenWidth: n("x-screen-width"),
      screenHeight: n("x-screen-height"),
    };
  }

  /**
   * Run actions in order (the first failing one stops the batch and the
   * error names its index); with `screenshot`, the answer carries a
   * screenshot taken after the last one.
   */
  async actions(
    actions: DesktopAction[],
    opts: CallOptions & { screenshot?: boolean | ScreenshotOptions } = {},
  ): Promise<ActionsResult> {
    const json: any = { actions };
    if (opts.screenshot) json.screenshot = screenshotBody(opts.screenshot === true ? {} : opts.screenshot);
    const d = await this.http.json("POST", this.path("/actions"), { json, signal: opts.signal });
    const out: ActionsResult = { cursor: { x: d?.cursor?.x ?? 0, y: d?.cursor?.y ?? 0 } };
    if (d?.screenshot) {
      const s = d.screenshot;
      out.screenshot = {
        format: s.format === "jpeg" ? "jpeg" : "png",
        data: Buffer.from(s.data ?? "", "base64"),
        width: s.width,
        height: s.height,
        screenWidth: s.width,
        screenHeight: s.height,
      };
    }
    return out;
  }

  /** Click at (x, y): left by default, or right, middle, back, forward. */
  async click(x: number, y: number, opts: CallOptions & { button?: DesktopAction["button"]; double?: boolean } = {}): Promise<void> {
    await this.actions([{ type: "click", x, y, button: opts.button, double: opts.double }], opts);
  }

  /** Move the pointer to (x, y). */
  async move(x: number, y: number, opts: CallOptions = {}): Promise<void> {
    await this.actions([{ type: "move", x, y }], opts);
  }

  /** Press the left button at the path's first point, move along it, release. */
  async drag(path: Point[], opts: CallOptions = {}): Promise<void> {
    if (path.length < 2) throw new InvalidArgumentError("a drag needs a path of two points or more");
    await this.actions([{ type: "drag", path }], opts);
  }

  /** Scroll dx, dy notches at (x, y): positive dy down, positive dx right. */
  async scroll(x: number, y: number, dx: number, dy: number, opts: CallOptions = {}): Promise<void> {
    await this.actions([{ type: "scroll", x, y, dx, dy }], opts);
  }

  /** Type text, any Unicode. */
  async type(text: string, opts: CallOptions = {}): Promise<void> {
    await this.actions([{ type: "type", text }], opts);
  }

  /** Press a key or chord, e.g. "Return", "ctrl+l", "ctrl+shift+t". */
  async press(keys: string, opts: CallOptions = {}): Promise<void> {
    await this.actions([{ type: "key", keys }], opts);
  }

  /** Where the pointer is. */
  async cursor(opts: CallOptions = {}): Promise<Point> {
    const d = await this.http.json("GET", this.path("/cursor"), { signal: opts.signal });
    return { x: d?.x ?? 0, y: d?.y ?? 0 };
  }

  /** The top-level windows. */
  async windows(opts: CallOptions = {}): Promise<Window[]> {
    const d = await this.http.json("GET", this.path("/windows"), { signal: opts.signal });
    return (d?.windows ?? []).map((w: any) => ({
      id: w.id,
      title: w.title ?? "",
      app: w.app,
      pid: w.pid,
      x: w.x,
      y: w.y,
      width: w.width,
      height: w.height,
      focused: !!w.focused,
    }));
  }

  /** Start an app ("chromium", "terminal") or a command on the display. */
  async launch(app: string | string[], opts: CallOptions & { env?: Record<string, string>; cwd?: string } = {}): Promise<m.ProcessInfo> {
    const json: any = typeof app === "string" ? { app } : { cmd: app };
    if (opts.env) json.env = opts.env;
    if (opts.cwd) json.cwd = opts.cwd;
    return m.processInfo(await this.http.json("POST", this.path("/launch"), { json, signal: opts.signal }));
  }

  /** Open a URL in Chromium on the display. */
  async open(url: string, opts: CallOptions = {}): Promise<m.ProcessInfo> {
    return m.processInfo(await this.http.json("POST", this.path("/open"), { json: { url }, signal: opts.signal }));
  }

  /**
   * The live view's URL (noVNC through the preview proxy, with the
   * sandbox's token): view-only unless viewOnly is false. Anyone holding
   * it can watch (or, interactive, drive) the desktop.
   */
  async streamUrl(opts: CallOptions & { viewOnly?: boolean } = {}): Promise<string> {
    const d = await this.http.json("GET", this.path("/stream"), {
      query: { view_only: String(opts.viewOnly ?? true) },
      signal: opts.signal,
    });
    return d.url;
  }
}
