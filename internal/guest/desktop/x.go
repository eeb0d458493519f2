package desktop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
	"golang.org/x/sys/unix"
)

func init() {
	// xgb logs to stderr by default (a missing Xauthority, a closed
	// connection); the agent's log is its own.
	xgb.Logger = log.New(io.Discard, "", 0)
}

// xconn is the agent's one connection to a display: screenshots (through
// a MIT-SHM segment when the server allows it), XTEST input, the keymap
// and window queries all go over it.
type xconn struct {
	c      *xgb.Conn
	root   xproto.Window
	width  int
	height int
	depth  byte

	// shotMu guards the SHM segment and the screenshot buffers.
	shotMu sync.Mutex
	shmSeg shm.Seg
	shmID  int
	shmBuf []byte // nil without MIT-SHM
	enc    encoder

	// inMu serializes input (a batch runs alone) and guards keys and
	// held.
	inMu sync.Mutex
	keys *keymap
	// held: the core state bits of the buttons mouse_down left down.
	held uint16

	atomMu sync.Mutex
	atoms  map[string]xproto.Atom
}

// dialX connects to display n (":n") with the MIT-MAGIC-COOKIE-1 cookie.
// The abstract socket is tried first (it exists without /tmp/.X11-unix),
// then the path.
func dialX(n int, cookie []byte) (*xconn, error) {
	var nc net.Conn
	var err error
	for _, addr := range []string{fmt.Sprintf("@/tmp/.X11-unix/X%d", n), fmt.Sprintf("/tmp/.X11-unix/X%d", n)} {
		nc, err = net.DialTimeout("unix", addr, 2*time.Second)
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := xgb.NewConnNet(&authConn{Conn: nc, cookie: cookie})
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	x := &xconn{c: c, shmID: -1, atoms: map[string]xproto.Atom{}}
	setup := xproto.Setup(c)
	if setup == nil || len(setup.Roots) == 0 {
		c.Close()
		return nil, errors.New("the X server reported no screen")
	}
	scr := setup.DefaultScreen(c)
	x.root = scr.Root
	x.width, x.height = int(scr.WidthInPixels), int(scr.HeightInPixels)
	x.depth = scr.RootDepth
	bpp := 0
	for _, f := range setup.PixmapFormats {
		if f.Depth == scr.RootDepth {
			bpp = int(f.BitsPerPixel)
		}
	}
	if bpp != 32 || setup.ImageByteOrder != xproto.ImageOrderLSBFirst || (x.depth != 24 && x.depth != 32) {
		c.Close()
		return nil, fmt.Errorf("unsupported screen format: depth %d, %d bits per pixel, byte order %d (want depth 24, 32 bits, LSB first)", x.depth, bpp, setup.ImageByteOrder)
	}
	if err := xtest.Init(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("the X server has no XTEST extension: %w", err)
	}
	return x, nil
}

// initSHM attaches a SysV shared memory segment for screenshots, readable
// by uid (the X server's user); without MIT-SHM (or where the server
// cannot attach it) screenshots use the core GetImage.
func (x *xconn) initSHM(uid int) error {
	if err := shm.Init(x.c); err != nil {
		return err
	}
	size := x.width * x.height * 4
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
	if err != nil {
		return fmt.Errorf("shmget: %w", err)
	}
	// Removed now: the segment lives while attached (ours and the
	// server's), so nothing leaks when either side dies.
	defer unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	if uid >= 0 && uid != os.Geteuid() {
		var d unix.SysvShmDesc
		if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &d); err == nil {
			d.Perm.Uid = uint32(uid)
			unix.SysvShmCtl(id, unix.IPC_SET, &d)
		}
	}
	buf, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		return fmt.Errorf("shmat: %w", err)
	}
	seg, err := shm.NewSegId(x.c)
	if err != nil {
		unix.SysvShmDetach(buf)
		return err
	}
	if err := shm.AttachChecked(x.c, seg, uint32(id), false).Check(); err != nil {
		unix.SysvShmDetach(buf)
		return fmt.Errorf("the X server could not attach the segment: %w", err)
	}
	x.shmSeg, x.shmID, x.shmBuf = seg, id, buf
	return nil
}

// close ends the connection and detaches the segment.
func (x *xconn) close() {
	x.c.Close()
	x.shotMu.Lock()
	if x.shmBuf != nil {
		unix.SysvShmDetach(x.shmBuf)
		x.shmBuf = nil
	}
	x.shotMu.Unlock()
}

// grab returns the pixels of r (BGRX, 4 bytes a pixel, stride 4*r.W). The
// slice is the SHM segment or a reply buffer: valid until the next grab;
// the caller holds shotMu.
func (x *xconn) grab(r rect) ([]byte, error) {
	if x.shmBuf != nil {
		_, err := shm.GetImage(x.c, xproto.Drawable(x.root), int16(r.X), int16(r.Y), uint16(r.W), uint16(r.H), 0xffffffff, xproto.ImageFormatZPixmap, x.shmSeg, 0).Reply()
		if err == nil {
			return x.shmBuf[:r.W*r.H*4], nil
		}
		// Fall through to the core request.
	}
	rep, err := xproto.GetImage(x.c, xproto.ImageFormatZPixmap, xproto.Drawable(x.root), int16(r.X), int16(r.Y), uint16(r.W), uint16(r.H), 0xffffffff).Reply()
	if err != nil {
		return nil, fmt.Errorf("GetImage: %w", err)
	}
	if len(rep.Data) < r.W*r.H*4 {
		return nil, fmt.Errorf("GetImage returned %d bytes, want %d", len(rep.Data), r.W*r.H*4)
	}
	return rep.Data, nil
}

// atom interns name once.
func (x *xconn) atom(name string) (xproto.Atom, error) {
	x.atomMu.Lock()
	defer x.atomMu.Unlock()
	if a, ok := x.atoms[name]; ok {
		return a, nil
	}
	rep, err := xproto.InternAtom(x.c, false, uint16(len(name)), name).Reply()
	if err != nil {
		return 0, err
	}
	x.atoms[name] = rep.Atom
	return rep.Atom, nil
}

// authConn presents the display's cookie: xgb reads its credentials from
// $XAUTHORITY, which the agent does not set for itself, so the first
// write (the connection setup) is rewritten to carry the cookie.
type authConn struct {
	net.Conn
	cookie []byte
	done   bool
}

func (a *authConn) Write(p []byte) (int, error) {
	if a.done || len(p) < 12 || p[0] != 0x6c {
		return a.Conn.Write(p)
	}
	a.done = true
	const name = "MIT-MAGIC-COOKIE-1"
	pad := func(n int) int { return (n + 3) &^ 3 }
	buf := make([]byte, 12+pad(len(name))+pad(len(a.cookie)))
	copy(buf, p[:6]) // byte order, pad, protocol major and minor
	binary.LittleEndian.PutUint16(buf[6:], uint16(len(name)))
	binary.LittleEndian.PutUint16(buf[8:], uint16(len(a.cookie)))
	copy(buf[12:], name)
	copy(buf[12+pad(len(name)):], a.cookie)
	if _, err := a.Conn.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeXauthority writes an Xauthority file granting cookie for display
// n to local clients of any host name (family FamilyWild), which is what
// Xvfb -auth reads and what XAUTHORITY points the desktop's programs to.
func writeXauthority(path string, n int, cookie []byte) error {
	var b []byte
	put := func(s []byte) {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint16(b, 0xffff) // FamilyWild
	put(nil)
	put([]byte(fmt.Sprint(n)))
	put([]byte("MIT-MAGIC-COOKIE-1"))
	put(cookie)
	return os.WriteFile(path, b, 0o600)
}
