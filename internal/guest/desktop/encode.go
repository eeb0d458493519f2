package desktop

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/jpeg"
	"io"

	"golang.org/x/image/draw"
)

// encoder turns BGRX pixels into PNG or JPEG. It keeps its buffers
// between screenshots (the caller serializes them): a screenshot is
// encoded every agent step, and allocating megabytes each time costs more
// than the grab.
//
// PNG is written here rather than by image/png: image/png tries all five
// row filters (Paeth included) on every row and needs an image.Image in
// RGBA; this writes 8-bit RGB straight from the X server's BGRX with the
// cheaper of the Sub and Up filters per row, through zlib at BestSpeed,
// about twice as fast on a desktop and no larger.
type encoder struct {
	zw   *zlib.Writer
	idat bytes.Buffer
	rows [3][]byte // raw, sub, up: each 1 + 3*w (the filter byte first)
	prev []byte
	rgba *image.RGBA // JPEG and scaling input
	dst  *image.RGBA // scaled image
}

// bgrxToRGBA converts pixels (stride 4*w) into a reused RGBA image.
func (e *encoder) bgrxToRGBA(px []byte, w, h int) *image.RGBA {
	if e.rgba == nil || e.rgba.Rect.Dx() != w || e.rgba.Rect.Dy() != h {
		e.rgba = image.NewRGBA(image.Rect(0, 0, w, h))
	}
	d := e.rgba.Pix
	for i := 0; i+3 < len(d) && i+3 < len(px); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = px[i+2], px[i+1], px[i], 0xff
	}
	return e.rgba
}

// scale draws src into a reused w x h image (approximate bilinear).
func (e *encoder) scale(src *image.RGBA, w, h int) *image.RGBA {
	if e.dst == nil || e.dst.Rect.Dx() != w || e.dst.Rect.Dy() != h {
		e.dst = image.NewRGBA(image.Rect(0, 0, w, h))
	}
	draw.ApproxBiLinear.Scale(e.dst, e.dst.Rect, src, src.Rect, draw.Src, nil)
	return e.dst
}

// jpeg writes img as JPEG at quality q.
func (e *encoder) jpeg(out io.Writer, img image.Image, q int) error {
	return jpeg.Encode(out, img, &jpeg.Options{Quality: q})
}

// png writes w x h pixels as an 8-bit RGB PNG. The source is BGRX
// (bgr true) or RGBA, 4 bytes a pixel, stride bytes a row.
func (e *encoder) png(out io.Writer, px []byte, w, h, stride int, bgr bool) error {
	n := 1 + 3*w
	for i := range e.rows {
		if cap(e.rows[i]) < n {
			e.rows[i] = make([]byte, n)
		}
		e.rows[i] = e.rows[i][:n]
	}
	if cap(e.prev) < n {
		e.prev = make([]byte, n)
	}
	e.prev = e.prev[:n]
	clear(e.prev)
	e.rows[1][0], e.rows[2][0] = 1, 2 // Sub, Up
	e.idat.Reset()
	if e.zw == nil {
		e.zw, _ = zlib.NewWriterLevel(&e.idat, zlib.BestSpeed)
	} else {
		e.zw.Reset(&e.idat)
	}
	i0, i2 := 2, 0
	if !bgr {
		i0, i2 = 0, 2
	}
	for y := range h {
		raw, sub, up := e.rows[0][1:n], e.rows[1][1:n], e.rows[2][1:n]
		prev := e.prev[1:n]
		src := px[y*stride : y*stride+4*w]
		// Convert, and filter Sub and Up in the same pass. The choice
		// between them is scored on every fourth pixel (the sum of
		// absolute values, the usual heuristic; Sub wins ties, the
		// common flat row): scoring every byte costs as much as zlib.
		var sSub, sUp int
		var pr, pg, pb byte
		for x := 0; x < w; x++ {
			s := src[4*x : 4*x+3 : 4*x+3]
			r, g, b := s[i0], s[1], s[i2]
			j := 3 * x
			d := raw[j : j+3 : j+3]
			d[0], d[1], d[2] = r, g, b
			sd := sub[j : j+3 : j+3]
			sd[0], sd[1], sd[2] = r-pr, g-pg, b-pb
			p := prev[j : j+3 : j+3]
			ud := up[j : j+3 : j+3]
			ud[0], ud[1], ud[2] = r-p[0], g-p[1], b-p[2]
			if x&3 == 0 {
				sSub += absb(sd[0]) + absb(sd[1]) + absb(sd[2])
				sUp += absb(ud[0]) + absb(ud[1]) + absb(ud[2])
			}
			pr, pg, pb = r, g, b
		}
		row := e.rows[1]
		if sUp < sSub {
			row = e.rows[2]
		}
		if _, err := e.zw.Write(row); err != nil {
			return err
		}
		e.prev, e.rows[0] = e.rows[0], e.prev
	}
	if err := e.zw.Close(); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	bw.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8-bit, truecolor
	writeChunk(bw, "IHDR", ihdr[:])
	writeChunk(bw, "IDAT", e.idat.Bytes())
	writeChunk(bw, "IEND", nil)
	return bw.Flush()
}

func absb(b byte) int {
	v := int(int8(b))
	m := v >> 63
	return (v ^ m) - m
}

func writeChunk(w *bufio.Writer, typ string, data []byte) {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	w.Write(hdr[:])
	w.Write(data)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:])
	crc.Write(data)
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc.Sum32())
	w.Write(c[:])
}
