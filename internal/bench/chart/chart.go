// Package chart draws a bench report's cost curves (bench.ScalePoint) as
// a PNG with gonum's plot library. It is its own package, linked only by
// cmd/agentbox-benchchart, so that the daemon and the CLI do not carry a
// plotting library and its fonts.
package chart

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/agentbox/agentbox/internal/bench"
)

// line is one curve: a name, a colour and which figure of a point.
type line struct {
	name  string
	color color.RGBA
	value func(bench.ScalePoint) bench.Summary
}

var lines = []line{
	{"create", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, func(p bench.ScalePoint) bench.Summary { return p.Create }},
	{"exec true", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, func(p bench.ScalePoint) bench.Summary { return p.Exec }},
	{"destroy", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, func(p bench.ScalePoint) bench.Summary { return p.Destroy }},
	{"list page", color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, func(p bench.ScalePoint) bench.Summary { return p.ListPage }},
}

// Write draws p50 (solid) and p99 (dashed) of create, exec, destroy and
// a list page against the number of live sandboxes, with title above, to
// path (a .png, 8 x 5 inches).
func Write(points []bench.ScalePoint, title, path string) error {
	if len(points) == 0 {
		return fmt.Errorf("no cost curve points to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "idle sandboxes alive"
	p.Y.Label.Text = "ms (solid p50, dashed p99)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for _, l := range lines {
		for _, q := range []struct {
			pct    string
			of     func(bench.Summary) float64
			dashed bool
		}{{"p50", func(s bench.Summary) float64 { return s.P50 }, false}, {"p99", func(s bench.Summary) float64 { return s.P99 }, true}} {
			xy := make(plotter.XYs, 0, len(points))
			for _, pt := range points {
				if s := l.value(pt); s.N > 0 {
					xy = append(xy, plotter.XY{X: float64(pt.Live), Y: q.of(s)})
				}
			}
			if len(xy) == 0 {
				continue
			}
			ln, sc, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			ln.Color, sc.Color = l.color, l.color
			ln.Width = vg.Points(1.5)
			sc.Shape = draw.CircleGlyph{}
			if q.dashed {
				ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			} else {
				p.Legend.Add(l.name, ln, sc)
			}
			p.Add(ln, sc)
		}
	}
	p.Y.Min = 0
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
