// Package ocitest builds small OCI images for tests: hand-written tar
// layers (including hostile ones), written as a docker-archive, an OCI
// layout directory or an OCI layout tar.
package ocitest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one tar entry. Type defaults to a regular file (or a directory
// when Name ends in "/"); Mode defaults to 0644 (0755 for directories).
type Entry struct {
	Name     string
	Type     byte
	Body     string
	Link     string
	Mode     int64
	UID, GID int
	Size     int64 // a header size without a body (truncated or sparse tests)
}

// Tar returns the tar stream of entries.
func Tar(entries []Entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 0)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode, Uid: e.UID, Gid: e.GID, ModTime: mt, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
			if len(e.Name) > 0 && e.Name[len(e.Name)-1] == '/' {
				h.Typeflag = tar.TypeDir
			}
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if e.Size > 0 {
			h.Size = e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(err)
		}
		if h.Typeflag == tar.TypeReg && e.Size == 0 {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				panic(err)
			}
		}
	}
	if err := tw.Close(); err != nil && entries[len(entries)-1].Size == 0 {
		panic(err)
	}
	return buf.Bytes()
}

// Layer makes a layer of entries, compressed with "gzip" or "zstd".
func Layer(entries []Entry, comp string) v1.Layer {
	b := Tar(entries)
	return RawLayer(b, comp)
}

// RawLayer makes a layer of the tar bytes b.
func RawLayer(b []byte, comp string) v1.Layer {
	opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	opts := []tarball.LayerOption{tarball.WithCompression(compression.GZip)}
	if comp == "zstd" {
		opts = []tarball.LayerOption{tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd)}
	}
	l, err := tarball.LayerFromOpener(opener, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// Image stacks layers on an empty image with cfg as its run config, for
// this host's platform unless arch is set.
func Image(cfg v1.Config, arch string, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	if arch == "" {
		arch = runtime.GOARCH
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	return mutate.ConfigFile(img, cf)
}

// WriteDockerArchive writes img as `docker save` would, to path.
func WriteDockerArchive(path string, img v1.Image) error {
	tag, err := name.NewTag("test/image:latest")
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// WriteLayout writes img as an OCI image layout directory dir.
func WriteLayout(dir string, img v1.Image) error {
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return lp.AppendImage(img)
}

// WriteLayoutTar writes img as a tar of an OCI image layout, to path.
func WriteLayoutTar(path string, img v1.Image) error {
	dir, err := os.MkdirTemp("", "ocitest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := WriteLayout(dir, img); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
