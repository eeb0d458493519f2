package code

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"
)

// The Jupyter messaging protocol (version 5.3) on the wire: a multipart
// ZeroMQ message of routing identities, the "<IDS|MSG>" delimiter, an
// HMAC-SHA256 signature (hex) of the next four frames, then the header,
// parent header, metadata and content as JSON, then any binary buffers.

const protocolVersion = "5.3"

var delimiter = []byte("<IDS|MSG>")

type header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// message is one decoded Jupyter message.
type message struct {
	Header  header
	Parent  header
	Content json.RawMessage
}

// signer signs and verifies messages with a connection's key.
type signer struct{ key []byte }

func (s signer) sign(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write(p)
	}
	return []byte(hex.EncodeToString(m.Sum(nil)))
}

// encode builds the frames of a new message of msgType with content.
func (s signer) encode(session, msgType string, content any) (frames [][]byte, msgID string, err error) {
	msgID = newID()
	h, err := json.Marshal(header{MsgID: msgID, Session: session, Username: "agentbox", Date: time.Now().UTC().Format(time.RFC3339Nano), MsgType: msgType, Version: protocolVersion})
	if err != nil {
		return nil, "", err
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, "", err
	}
	parent, meta := []byte("{}"), []byte("{}")
	return [][]byte{delimiter, s.sign(h, parent, meta, c), h, parent, meta, c}, msgID, nil
}

var errBadSignature = errors.New("jupyter message signature does not match the connection key")

// decode parses frames (identities first, then the delimiter), checking
// the signature in constant time.
func (s signer) decode(frames [][]byte) (*message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, errors.New("jupyter message has too few frames")
	}
	f := frames[i+1:]
	want := s.sign(f[1], f[2], f[3], f[4])
	if !hmac.Equal(want, f[0]) {
		return nil, errBadSignature
	}
	m := &message{Content: f[4]}
	if err := json.Unmarshal(f[1], &m.Header); err != nil {
		return nil, err
	}
	if len(f[2]) > 2 {
		json.Unmarshal(f[2], &m.Parent)
	}
	return m, nil
}

// newID returns 16 random bytes as hex.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
