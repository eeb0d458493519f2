package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// FuzzExecStream parses an exec stream body as the guest does: one
// ExecRequest line, validated, then StdinFrame lines fed to a pipe. It
// checks that parsing ends (EOF, a bad frame, or the body's end), never
// panics, and that the bytes reaching stdin are exactly the data of the
// frames decoded before the first eof frame.
func FuzzExecStream(f *testing.F) {
	for _, s := range []string{
		`{"cmd":["cat"],"stdin_stream":true}` + "\n" + `{"data":"aGk="}` + "\n" + `{"eof":true}` + "\n",
		`{"shell":"cat","stdin_stream":true}` + "\n" + `{"data":"YQ=="}{"data":"Yg=="}` + "\n",
		`{"cmd":["cat"],"stdin_stream":true}` + "\n" + `{"data":"!!"}` + "\n",
		`{"cmd":["cat"],"stdin_stream":true}` + "\n" + `{"eof":true}` + "\n" + `{"data":"bGF0ZQ=="}` + "\n",
		`{"cmd":["true"]}` + "\n" + `not json`,
		`{"cmd":["cat"],"stdin_stream":true}` + "\n" + `[1,2]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		dec := json.NewDecoder(bytes.NewReader(body))
		var req api.ExecRequest
		if dec.Decode(&req) != nil || validate(&req, true) != nil {
			return
		}
		// What stdin should receive, parsed independently of feedStdin.
		var want []byte
		wantBad := false
		ref := json.NewDecoder(bytes.NewReader(body))
		_ = ref.Decode(&api.ExecRequest{})
		for {
			var fr api.StdinFrame
			err := ref.Decode(&fr)
			if err != nil {
				var syn *json.SyntaxError
				var typ *json.UnmarshalTypeError
				wantBad = errors.As(err, &syn) || errors.As(err, &typ)
				break
			}
			want = append(want, fr.Data...)
			if fr.EOF {
				break
			}
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, 1)
		go func() { b, _ := io.ReadAll(pr); pr.Close(); got <- b }()
		done := make(chan error, 1)
		go feedStdin(dec, pw, done)
		var ferr error
		select {
		case ferr = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("feedStdin did not finish on a %d-byte body", len(body))
		}
		pw.Close() // feedStdin closed it at EOF; closing twice is harmless
		data := <-got
		if !bytes.Equal(data, want) {
			t.Fatalf("stdin got %q, want %q", data, want)
		}
		// A frame that does not decode, before any eof frame, must be
		// reported as the client's fault (the exec is then killed).
		var bad *badFrameError
		if wantBad && !errors.As(ferr, &bad) {
			t.Fatalf("a bad frame was reported as %v, want a badFrameError", ferr)
		}
	})
}
