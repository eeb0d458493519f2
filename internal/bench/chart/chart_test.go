package chart

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/bench"
)

func TestWrite(t *testing.T) {
	pts := []bench.ScalePoint{
		{Live: 0, Create: bench.Summary{N: 5, P50: 20, P99: 40}, Exec: bench.Summary{N: 5, P50: 3, P99: 6}, Destroy: bench.Summary{N: 5, P50: 9, P99: 20}},
		{Live: 500, Create: bench.Summary{N: 5, P50: 22, P99: 50}, Exec: bench.Summary{N: 5, P50: 3.5, P99: 7}, Destroy: bench.Summary{N: 5, P50: 10, P99: 22}},
	}
	path := filepath.Join(t.TempDir(), "scale.png")
	if err := Write(pts, "test", path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() < 500 || r.Dy() < 300 {
		t.Errorf("image %v, want 8x5 inches", r)
	}
	if err := Write(nil, "x", path); err == nil {
		t.Error("no points: no error")
	}
}
