// Package closer wraps an HTTP response body so that a function runs once
// the body is closed, keeping an upgraded connection's body (a PTY, a
// port dial: an io.ReadWriteCloser) writable. The idle clock's activity
// and the tracing's guest spans both end there.
package closer

import "io"

// Body returns body wrapped so that fn runs after body's Close (each
// Close runs it; fn must tolerate that).
func Body(body io.ReadCloser, fn func()) io.ReadCloser {
	if rwc, ok := body.(io.ReadWriteCloser); ok {
		return &rwCloser{ReadWriteCloser: rwc, fn: fn}
	}
	return &rCloser{ReadCloser: body, fn: fn}
}

type rCloser struct {
	io.ReadCloser
	fn func()
}

func (b *rCloser) Close() error {
	err := b.ReadCloser.Close()
	b.fn()
	return err
}

type rwCloser struct {
	io.ReadWriteCloser
	fn func()
}

func (b *rwCloser) Close() error {
	err := b.ReadWriteCloser.Close()
	b.fn()
	return err
}
