//go:build !linux

package idrange

// Pool hands out sandbox uid ranges; id-mapped mounts are Linux's.
type Pool struct{}
