package storage

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

// testFiles makes a checkpoint-like directory: a sparse file with data
// at both ends, a small one, an empty one, and the completion marker
// (skipped).
func testFiles(t *testing.T) (string, []SnapshotFile) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "ram"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("tail"), 300_000), 9<<20); err != nil { // > 1 chunk, after a hole
		t.Fatal(err)
	}
	f.Close()
	for name, data := range map[string]string{"checkpoint.img": "state of the kernel", "empty": "", "complete": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := SnapshotFilesOf(dir, true, "complete")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("files %+v", files)
	}
	return dir, files
}

func testStream(t *testing.T, dir string, files []SnapshotFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := writeSnapshotStream(&buf, []byte(`{}`), 1, func(_ int, w io.Writer) error {
		_, err := w.Write([]byte("a layer"))
		return err
	}, dir, files)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// receiveStream reads data as a stream of one layer and files list into
// a new directory, which it returns.
func receiveStream(t *testing.T, data []byte, list []SnapshotFile) (string, error) {
	t.Helper()
	out := t.TempDir()
	s, err := NewSnapshotStreamReader(bytes.NewReader(data))
	if err != nil {
		return out, err
	}
	more, err := s.NextLayer()
	if err != nil || !more {
		t.Fatalf("first layer: %v %v", more, err)
	}
	if _, err := io.Copy(io.Discard, s); err != nil {
		return out, err
	}
	if more, err := s.NextLayer(); err != nil || more {
		return out, errors.Join(err, errors.New("a second layer"))
	}
	return out, ReceiveSnapshotStreamFiles(s, out, list)
}

// TestSnapshotStreamFiles sends a checkpoint's files after a layer and
// gets them back byte for byte (holes kept); a stream whose files differ
// from the config's list (renamed, missing, one more, bigger, a flipped
// byte) fails invalid.
func TestSnapshotStreamFiles(t *testing.T) {
	dir, files := testFiles(t)
	good := testStream(t, dir, files)
	out, err := receiveStream(t, good, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		want, _ := os.ReadFile(filepath.Join(dir, f.Name))
		got, err := os.ReadFile(filepath.Join(out, f.Name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes back of %d (%v)", f.Name, len(got), len(want), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "ram")); err != nil {
		t.Error(err)
	} else if blocks := fi.Sys().(*syscall.Stat_t).Blocks; blocks*512 >= fi.Size() {
		t.Errorf("ram came back without its hole: %d blocks for %d bytes", blocks, fi.Size())
	}

	// A stream without files ends after its layers; one with files is
	// refused where the config lists none.
	if _, err := receiveStream(t, testStream(t, dir, nil), nil); err != nil {
		t.Errorf("a stream without files: %v", err)
	}
	if _, err := receiveStream(t, good, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("files the config does not list: %v", err)
	}

	flipped := bytes.Clone(good)
	flipped[len(good)-40] ^= 1 // in the last file's data or end frame
	renamed := slices.Clone(files)
	renamed[0].Name = "other"
	bigger := slices.Clone(files)
	bigger[0].Size++
	smaller := slices.Clone(files)
	smaller[0].Size--
	for name, c := range map[string]struct {
		data []byte
		list []SnapshotFile
	}{
		"flipped byte": {flipped, files},
		"renamed":      {good, renamed},
		"one missing":  {good, files[:2]},
		"one more":     {good, append(slices.Clone(files), SnapshotFile{Name: "more"})},
		"bigger":       {good, bigger},
		"smaller":      {good, smaller},
		"cut short":    {good[:len(good)-10], files},
	} {
		out, err := receiveStream(t, c.data, c.list)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
		_ = out
	}
}

// TestReceiveSnapshotFileHostile: names that would leave the directory,
// a link planted in it, a file that exists, more bytes than listed and a
// wrong digest are all refused, and nothing is written outside.
func TestReceiveSnapshotFileHostile(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "x"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "exists"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []SnapshotFile{
		{Name: "../escape", Size: 1},
		{Name: "/etc/passwd", Size: 1},
		{Name: ".hidden", Size: 1},
		{Name: "a/b", Size: 1},
		{Name: "link", Size: 1},
		{Name: "exists", Size: 1},
		{Name: "short", Size: 5},
		{Name: "long", Size: 0},
		{Name: "digest", Size: 1, Digest: "sha256:" + strings.Repeat("0", 64)},
		{Name: "baddigest", Size: 1, Digest: "md5:00"},
		{Name: "negative", Size: -1},
	} {
		err := ReceiveSnapshotFile(dir, f, strings.NewReader("x"))
		if err == nil {
			t.Errorf("%q: received", f.Name)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written outside: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "exists")); string(b) != "old" {
		t.Errorf("an existing file was overwritten: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"exists", "link"}) {
		t.Errorf("left in the directory: %v", names)
	}
	// The list's own checks: count, sum against a limit, reserved names.
	many := make([]SnapshotFile, MaxSnapshotFiles+1)
	for i := range many {
		many[i] = SnapshotFile{Name: "f" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
	}
	if err := CheckSnapshotFiles(many, nil, 0); err == nil {
		t.Error("too many files accepted")
	}
	if err := CheckSnapshotFiles([]SnapshotFile{{Name: "a", Size: 60}, {Name: "b", Size: 50}}, nil, 100); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("over the limit: %v", err)
	}
	if err := CheckSnapshotFiles([]SnapshotFile{{Name: "complete"}}, []string{"complete"}, 0); err == nil {
		t.Error("a reserved name accepted")
	}
	if err := CheckSnapshotFiles([]SnapshotFile{{Name: "a"}, {Name: "a"}}, nil, 0); err == nil {
		t.Error("a name twice accepted")
	}
}

// FuzzSnapshotStreamFiles reads arbitrary bytes as a snapshot stream's
// files section after one layer, its list from the config (JSON) checked
// first, as an import does: no panic, every failure invalid (or
// exhausted), and nothing but the listed names in the directory.
func FuzzSnapshotStreamFiles(f *testing.F) {
	frame := func(typ byte, payload []byte) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(b, payload...)
	}
	var ok bytes.Buffer
	ok.WriteString(streamMagic)
	ok.Write(frame(frameConfig, []byte(`[{"name":"a","size":4}]`)))
	sw := &streamWriter{w: &ok, h: newSHA()}
	_, _ = sw.Write([]byte("layer"))
	ok.Write(frame(frameEnd, sw.h.Sum(nil)))
	ok.Write(frame(frameFile, []byte("a")))
	sw.h.Reset()
	_, _ = sw.Write([]byte("data"))
	ok.Write(frame(frameEnd, sw.h.Sum(nil)))
	ok.Write(frame(frameLast, nil))
	f.Add(ok.Bytes())
	f.Add(bytes.Replace(ok.Bytes(), []byte("F\x00\x00\x00\x01a"), []byte("F\x00\x00\x00\x03../"), 1))
	f.Add(bytes.Replace(ok.Bytes(), []byte(`"size":4`), []byte(`"size":9`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(err error) {
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Fatalf("error %v is not invalid-argument", err)
			}
		}
		s, err := NewSnapshotStreamReader(bytes.NewReader(data))
		check(err)
		if err != nil {
			return
		}
		var list []SnapshotFile
		if json.Unmarshal(s.Config, &list) != nil {
			return
		}
		if err := CheckSnapshotFiles(list, []string{"complete"}, 1<<20); err != nil {
			check(err)
			return
		}
		more, err := s.NextLayer()
		check(err)
		if err != nil || !more {
			return
		}
		if _, err := io.Copy(io.Discard, s); err != nil {
			check(err)
			return
		}
		dir := t.TempDir()
		check(ReceiveSnapshotStreamFiles(s, dir, list))
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !slices.ContainsFunc(list, func(f SnapshotFile) bool { return f.Name == e.Name() }) || !e.Type().IsRegular() {
				t.Fatalf("%s in the directory, not listed", e.Name())
			}
		}
	})
}
