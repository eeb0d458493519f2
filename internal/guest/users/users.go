// Package users resolves user names and numeric uids to the uid, gid,
// supplementary groups, home and shell that the guest agent runs processes
// and writes files as. It reads /etc/passwd and /etc/group of the sandbox's
// own root (the guest agent runs after pivot_root, so "/" is the sandbox),
// never the host's.
package users

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// User is a resolved sandbox user.
type User struct {
	Name string
	UID  int
	GID  int
	// Groups are the supplementary groups: every group in /etc/group that
	// lists the user as a member, in file order, without duplicates. The
	// primary GID is not repeated here unless /etc/group lists it.
	Groups []int
	Home   string
	Shell  string
}

// maxDBSize caps how much of /etc/passwd or /etc/group is read: the files
// belong to the sandbox and may be hostile.
const maxDBSize = 16 << 20

// maxID is the largest valid uid or gid ((uid_t)-1 is reserved).
const maxID = 1<<32 - 2

// Lookup resolves name in the current root's /etc/passwd and /etc/group.
// name is a user name or a numeric uid; "" means root. A numeric uid that
// has no passwd entry is allowed: its gid is the uid and its home is "/".
func Lookup(name string) (User, error) {
	return LookupIn("/", name)
}

// LookupIn is Lookup with the databases read from root/etc/passwd and
// root/etc/group. Symlinks in those paths are resolved as if root were "/",
// so they cannot leave root. Tests pass a temporary directory.
func LookupIn(root, name string) (User, error) {
	if name == "" {
		name = "0"
	}
	passwd, err := readDB(root, "etc/passwd")
	if err != nil {
		return User{}, err
	}
	uid, numeric := parseID(name)
	if !numeric && strings.ContainsAny(name, ":\n\x00") {
		return User{}, errdefs.Invalid("user %q is not a valid user name or numeric uid", name)
	}
	if numeric && uid < 0 {
		return User{}, errdefs.Invalid("uid %s is out of range (0 to %d)", name, maxID)
	}

	u, found := findPasswd(passwd, name, uid, numeric)
	if !found {
		switch {
		case numeric:
			u = User{Name: name, UID: uid, GID: uid, Home: "/", Shell: "/bin/sh"}
			if uid == 0 {
				u.Name, u.Home = "root", "/root"
			}
		case name == "root":
			u = User{Name: "root", Home: "/root", Shell: "/bin/sh"}
		default:
			return User{}, errdefs.Invalid("user %q not found in /etc/passwd; create it in the template or pass a numeric uid", name)
		}
	}

	group, err := readDB(root, "etc/group")
	if err != nil {
		return User{}, err
	}
	u.Groups = findGroups(group, u.Name)
	return u, nil
}

// parseID parses a decimal id. ok reports whether s is all digits; id is -1
// when it is out of range.
func parseID(s string) (id int, ok bool) {
	if s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxID {
		return -1, true
	}
	return int(n), true
}

// findPasswd scans passwd lines name:pw:uid:gid:gecos:home:shell.
func findPasswd(db []byte, name string, uid int, numeric bool) (User, bool) {
	sc := bufio.NewScanner(bytes.NewReader(db))
	sc.Buffer(make([]byte, 0, 4096), maxDBSize)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 7 {
			continue
		}
		u, okU := parseID(f[2])
		g, okG := parseID(f[3])
		if !okU || !okG || u < 0 || g < 0 {
			continue
		}
		if (numeric && u == uid) || (!numeric && f[0] == name) {
			return User{Name: f[0], UID: u, GID: g, Home: f[5], Shell: f[6]}, true
		}
	}
	return User{}, false
}

// findGroups scans group lines name:pw:gid:member,member for name.
func findGroups(db []byte, name string) []int {
	var groups []int
	seen := map[int]bool{}
	sc := bufio.NewScanner(bytes.NewReader(db))
	sc.Buffer(make([]byte, 0, 4096), maxDBSize)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		g, ok := parseID(f[2])
		if !ok || g < 0 || seen[g] {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if strings.TrimSpace(m) == name {
				groups = append(groups, g)
				seen[g] = true
				break
			}
		}
	}
	return groups
}

// readDB reads root/rel resolved inside root. A missing file reads as
// empty. Only regular files are read (a fifo planted at /etc/passwd must
// not block the guest), and at most maxDBSize bytes.
func readDB(root, rel string) ([]byte, error) {
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening root %s: %w", root, err)
	}
	defer unix.Close(rootfd)
	fd, err := unix.Openat2(rootfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening /%s: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat /%s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: /%s is not a regular file; fix the template", errdefs.ErrFailedPrecondition, rel)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(fdReader(fd), maxDBSize+1)); err != nil {
		return nil, fmt.Errorf("reading /%s: %w", rel, err)
	}
	if buf.Len() > maxDBSize {
		return nil, fmt.Errorf("%w: /%s is larger than %d bytes", errdefs.ErrFailedPrecondition, rel, maxDBSize)
	}
	return buf.Bytes(), nil
}

type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}
