package storage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/agentbox/agentbox/errdefs"
)

// The snapshot stream: a snapshot moved from node to node in one
// uncompressed stream (GET /v1/snapshots/{ref}/export into POST
// /v1/snapshots/import), with no registry and no temp file on the way.
// It carries what the OCI artifact carries (snapshot_oci_linux.go): the
// config, then each layer's overlay-format tar, bottom first, then the
// snapshot's files (a memory checkpoint's; snapshot_files.go).
//
//	stream = magic frame*
//	magic  = "AGBXSNAP" 0x00 0x01          (10 bytes; version 1)
//	frame  = type (1 byte) length (uint32, big endian) payload
//
// Frame types, in this order:
//
//	'C'  once, first: the config JSON (at most MaxStreamConfig bytes)
//	'D'  data of the current layer's tar (at most MaxStreamChunk bytes);
//	     the first layer starts after 'C', each next one after an 'E'
//	'E'  end of the current layer: the 32-byte sha256 of its tar (the
//	     layer's diff id, as in the OCI artifact's config)
//	'F'  after the last layer, each snapshot file's start (its name),
//	     then its 'D' frames and an 'E' with its sha256 (snapshot_files.go)
//	'Z'  end of the stream, empty; nothing may follow it
//
// A stream cut short (no 'Z') is not a snapshot: the import fails.
const (
	streamMagic     = "AGBXSNAP\x00\x01"
	MaxStreamConfig = 1 << 20
	MaxStreamChunk  = 4 << 20
	// MaxSnapshotStream bounds an import's request body: the data limit
	// of an import (maxImageBytes) and the framing and tar headers.
	MaxSnapshotStream int64 = 80 << 30

	frameConfig = 'C'
	frameData   = 'D'
	frameEnd    = 'E'
	frameLast   = 'Z'
)

// SnapshotStreamType is the media type of a snapshot stream.
const SnapshotStreamType = "application/vnd.agentbox.snapshot.stream.v1"

// streamWriter writes the frames of a snapshot stream.
type streamWriter struct {
	w   io.Writer
	hdr [5]byte
	h   hash.Hash // of the current layer's tar
}

func (s *streamWriter) frame(typ byte, payload []byte) error {
	s.hdr[0] = typ
	binary.BigEndian.PutUint32(s.hdr[1:], uint32(len(payload)))
	if _, err := s.w.Write(s.hdr[:]); err != nil {
		return err
	}
	if len(payload) == 0 {
		return nil
	}
	_, err := s.w.Write(payload)
	return err
}

// Write writes p as 'D' frames of the current layer.
func (s *streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), MaxStreamChunk)]
		s.h.Write(c)
		if err := s.frame(frameData, c); err != nil {
			return n, err
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// SnapshotStreamReader reads a snapshot stream (written by
// Pool.ExportSnapshot), checking its framing; every error is an
// errdefs.Invalid that says the stream is corrupt or cut short.
type SnapshotStreamReader struct {
	r     *bufio.Reader
	left  uint32 // bytes left of the current 'D' frame
	inLyr bool   // a layer is being read
	done  bool   // 'Z' seen
	// inFiles: the files section (snapshot_files.go) has begun.
	inFiles bool
	layers  int // layers ended
	h       hash.Hash
	hdr     [5]byte
	Config  []byte
}

// NewSnapshotStreamReader checks the magic and reads the config frame.
func NewSnapshotStreamReader(r io.Reader) (*SnapshotStreamReader, error) {
	s := &SnapshotStreamReader{r: bufio.NewReaderSize(r, 256<<10), h: sha256.New()}
	var m [len(streamMagic)]byte
	if _, err := io.ReadFull(s.r, m[:]); err != nil || string(m[:]) != streamMagic {
		return nil, errdefs.Invalid("not an agentbox snapshot stream (it does not start with the stream's magic); send what GET /v1/snapshots/{ref}/export answers")
	}
	typ, n, err := s.header()
	if err != nil {
		return nil, err
	}
	if typ != frameConfig || n > MaxStreamConfig {
		return nil, errdefs.Invalid("snapshot stream: the first frame is not a config of at most %d bytes", MaxStreamConfig)
	}
	s.Config = make([]byte, n)
	if _, err := io.ReadFull(s.r, s.Config); err != nil {
		return nil, cutShort(err)
	}
	return s, nil
}

func cutShort(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errdefs.Invalid("snapshot stream: cut short (the source node or the connection failed)")
	}
	return errdefs.Invalid("snapshot stream: reading it: %v", err)
}

func (s *SnapshotStreamReader) header() (byte, uint32, error) {
	if _, err := io.ReadFull(s.r, s.hdr[:]); err != nil {
		return 0, 0, cutShort(err)
	}
	return s.hdr[0], binary.BigEndian.Uint32(s.hdr[1:]), nil
}

// NextLayer starts the next layer; its data is then read with Read,
// which answers io.EOF at the layer's end once its sha256 matched. It
// reports false at the stream's end ('Z'), after which nothing may
// follow, and before its files section ('F': NextFile).
func (s *SnapshotStreamReader) NextLayer() (bool, error) {
	if s.inLyr {
		// The rest of the layer (a tar's padding) is read and checked.
		if _, err := io.Copy(io.Discard, s); err != nil {
			return false, err
		}
	}
	if s.done {
		return false, nil
	}
	b, err := s.r.Peek(1)
	if err != nil {
		return false, cutShort(err)
	}
	if b[0] == frameFile {
		return false, nil // the files section: no more layers
	}
	if b[0] == frameLast {
		typ, n, err := s.header()
		if err != nil {
			return false, err
		}
		if typ != frameLast || n != 0 {
			return false, errdefs.Invalid("snapshot stream: the end frame is not empty")
		}
		if _, err := s.r.ReadByte(); !errors.Is(err, io.EOF) {
			return false, errdefs.Invalid("snapshot stream: data after its end")
		}
		s.done = true
		return false, nil
	}
	if s.inFiles {
		return false, errdefs.Invalid("snapshot stream: a layer after its files")
	}
	s.inLyr = true
	s.h.Reset()
	return true, nil
}

// Layers is the number of layers read to their end.
func (s *SnapshotStreamReader) Layers() int { return s.layers }

// Read reads the current layer's tar.
func (s *SnapshotStreamReader) Read(p []byte) (int, error) {
	if !s.inLyr {
		return 0, io.EOF
	}
	for s.left == 0 {
		typ, n, err := s.header()
		if err != nil {
			return 0, err
		}
		switch typ {
		case frameData:
			if n > MaxStreamChunk {
				return 0, errdefs.Invalid("snapshot stream: a data frame of %d bytes (at most %d)", n, MaxStreamChunk)
			}
			s.left = n
		case frameEnd:
			var sum [sha256.Size]byte
			if n != sha256.Size {
				return 0, errdefs.Invalid("snapshot stream: a layer's end frame is %d bytes, not %d", n, sha256.Size)
			}
			if _, err := io.ReadFull(s.r, sum[:]); err != nil {
				return 0, cutShort(err)
			}
			if !bytes.Equal(sum[:], s.h.Sum(nil)) {
				what := fmt.Sprintf("layer %d", s.layers+1)
				if s.inFiles {
					what = "a file"
				}
				return 0, errdefs.Invalid("snapshot stream: %s does not match its sha256 %s (the stream is corrupt)", what, hex.EncodeToString(sum[:]))
			}
			s.inLyr = false
			if !s.inFiles {
				s.layers++
			}
			return 0, io.EOF
		default:
			return 0, errdefs.Invalid("snapshot stream: a frame of type %q inside a layer", typ)
		}
	}
	if uint32(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= uint32(n)
	s.h.Write(p[:n])
	if err != nil {
		return n, cutShort(err)
	}
	return n, nil
}

// LayerDigest is the sha256 of the last layer read to its end.
func (s *SnapshotStreamReader) LayerDigest() string {
	return "sha256:" + hex.EncodeToString(s.h.Sum(nil))
}

func newSHA() hash.Hash { return sha256.New() }
