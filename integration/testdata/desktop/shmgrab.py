"""Grab one pixel of the X display $DISPLAY twice: with MIT-SHM
(XShmGetImage into a SysV shared memory segment, what the guest agent's
screenshots use) and with the core protocol's GetImage, through Xlib with
ctypes (the desktop template has no Python X bindings).

Usage: python3 shmgrab.py X Y
Prints "shm R G B" and "core R G B" on success; exits non-zero and says
why when the extension is missing or an X error arrives.
"""
import ctypes as C
import sys

X = C.CDLL("libX11.so.6")
Xext = C.CDLL("libXext.so.6")
libc = C.CDLL("libc.so.6", use_errno=True)


class XImage(C.Structure):
    # The leading fields of Xlib's XImage (the rest is not read).
    _fields_ = [("width", C.c_int), ("height", C.c_int), ("xoffset", C.c_int),
                ("format", C.c_int), ("data", C.c_void_p),
                ("byte_order", C.c_int), ("bitmap_unit", C.c_int),
                ("bitmap_bit_order", C.c_int), ("bitmap_pad", C.c_int),
                ("depth", C.c_int), ("bytes_per_line", C.c_int),
                ("bits_per_pixel", C.c_int)]


class ShmSegmentInfo(C.Structure):
    _fields_ = [("shmseg", C.c_ulong), ("shmid", C.c_int),
                ("shmaddr", C.c_void_p), ("readOnly", C.c_int)]


errors = []
HANDLER = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)


@HANDLER
def on_error(display, event):
    # XErrorEvent.error_code is the byte at offset 32 on 64-bit Linux.
    errors.append(C.cast(event, C.POINTER(C.c_ubyte * 40)).contents[32])
    return 0


def sig(lib, name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P, U, I, UL = C.c_void_p, C.c_uint, C.c_int, C.c_ulong
XOpenDisplay = sig(X, "XOpenDisplay", P, C.c_char_p)
XSetErrorHandler = sig(X, "XSetErrorHandler", P, HANDLER)
XDefaultScreen = sig(X, "XDefaultScreen", I, P)
XDefaultVisual = sig(X, "XDefaultVisual", P, P, I)
XDefaultDepth = sig(X, "XDefaultDepth", I, P, I)
XRootWindow = sig(X, "XRootWindow", UL, P, I)
XDisplayWidth = sig(X, "XDisplayWidth", I, P, I)
XDisplayHeight = sig(X, "XDisplayHeight", I, P, I)
XSync = sig(X, "XSync", I, P, I)
XGetImage = sig(X, "XGetImage", C.POINTER(XImage), P, UL, I, I, U, U, UL, I)
XShmQueryExtension = sig(Xext, "XShmQueryExtension", I, P)
XShmCreateImage = sig(Xext, "XShmCreateImage", C.POINTER(XImage), P, P, U, I,
                      P, C.POINTER(ShmSegmentInfo), U, U)
XShmAttach = sig(Xext, "XShmAttach", I, P, C.POINTER(ShmSegmentInfo))
XShmDetach = sig(Xext, "XShmDetach", I, P, C.POINTER(ShmSegmentInfo))
XShmGetImage = sig(Xext, "XShmGetImage", I, P, UL, C.POINTER(XImage), I, I, UL)
shmget = sig(libc, "shmget", I, I, C.c_size_t, I)
shmat = sig(libc, "shmat", P, I, P, I)
shmctl = sig(libc, "shmctl", I, I, I, P)

ZPIXMAP, IPC_PRIVATE, IPC_CREAT, IPC_RMID, ALL_PLANES = 2, 0, 0o1000, 0, 2**64 - 1


def rgb(base, img, x, y):
    if img.bits_per_pixel != 32:
        sys.exit(f"unexpected {img.bits_per_pixel} bits per pixel")
    b, g, r = C.string_at(base + y * img.bytes_per_line + x * 4, 3)
    return r, g, b


def main():
    x, y = int(sys.argv[1]), int(sys.argv[2])
    XSetErrorHandler(on_error)
    d = XOpenDisplay(None)
    if not d:
        sys.exit("cannot open the display")
    s = XDefaultScreen(d)
    root = XRootWindow(d, s)
    w, h = XDisplayWidth(d, s), XDisplayHeight(d, s)
    if not XShmQueryExtension(d):
        sys.exit("the X server has no MIT-SHM extension")
    info = ShmSegmentInfo()
    img = XShmCreateImage(d, XDefaultVisual(d, s), XDefaultDepth(d, s),
                          ZPIXMAP, None, C.byref(info), w, h)
    if not img:
        sys.exit("XShmCreateImage failed")
    size = img.contents.bytes_per_line * img.contents.height
    info.shmid = shmget(IPC_PRIVATE, size, IPC_CREAT | 0o600)
    if info.shmid < 0:
        sys.exit(f"shmget: errno {C.get_errno()}")
    addr = shmat(info.shmid, None, 0)
    if addr is None or addr == C.c_void_p(-1).value:
        sys.exit(f"shmat: errno {C.get_errno()}")
    info.shmaddr = addr
    img.contents.data = addr
    info.readOnly = 0
    if not XShmAttach(d, C.byref(info)):
        sys.exit("XShmAttach failed")
    XSync(d, 0)
    # Marked for removal now: it goes when both sides have detached.
    shmctl(info.shmid, IPC_RMID, None)
    if errors:
        sys.exit(f"X error {errors} attaching the segment (the server cannot reach it)")
    if not XShmGetImage(d, root, img, 0, 0, ALL_PLANES):
        sys.exit("XShmGetImage failed")
    XSync(d, 0)
    if errors:
        sys.exit(f"X error {errors} in XShmGetImage")
    print("shm %d %d %d" % rgb(addr, img.contents, x, y))
    core = XGetImage(d, root, x, y, 1, 1, ALL_PLANES, ZPIXMAP)
    if not core:
        sys.exit("XGetImage failed")
    print("core %d %d %d" % rgb(core.contents.data, core.contents, 0, 0))
    XShmDetach(d, C.byref(info))
    XSync(d, 0)


main()
