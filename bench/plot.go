package bench

import (
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// eventColors gives each kind of event its marker colour.
var eventColors = map[string]color.RGBA{
	EventKill:       {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	EventAssignment: {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	EventRestart:    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	EventPause:      {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	EventResume:     {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// WritePlot draws throughput and p99 latency over time, one panel each, with the run's events
// marked, to path: SVG for a .svg name, PNG otherwise.
func (r *Report) WritePlot(path string) error {
	tp, err := r.timelinePlot("throughput (records/s)", func(p Point) float64 { return p.RecordsPerSec })
	if err != nil {
		return err
	}
	lp, err := r.timelinePlot("p99 latency (ms)", func(p Point) float64 { return p.P99Ms })
	if err != nil {
		return err
	}
	tp.Title.Text = fmt.Sprintf("ringstream bench: %d nodes, %s stream (%d copies, %s), %d producers",
		r.Config.Nodes, r.Config.Stream, r.Config.Copies, r.Config.Policy, r.Config.Producers)
	w, h := 10*vg.Inch, 7*vg.Inch
	var canvas vg.CanvasWriterTo
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4),
		PadY: vg.Points(12)}
	cells := plot.Align([][]*plot.Plot{{tp}, {lp}}, tiles, draw.New(canvas))
	tp.Draw(cells[0][0])
	lp.Draw(cells[1][0])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	return nil
}

// timelinePlot is one panel: value over the timeline in seconds, with a vertical line per event.
func (r *Report) timelinePlot(ylabel string, value func(Point) float64) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "time since the start of load (s)"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	xys := make(plotter.XYs, len(r.Timeline))
	yMax := 1.0
	for i, pt := range r.Timeline {
		xys[i] = plotter.XY{X: pt.AtMs / 1000, Y: value(pt)}
		yMax = max(yMax, xys[i].Y)
	}
	if len(xys) == 0 {
		xys = plotter.XYs{{}}
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	p.Add(line)
	named := map[string]bool{}
	for _, e := range r.Events {
		c, ok := eventColors[e.Name]
		if !ok {
			continue
		}
		mark, err := plotter.NewLine(plotter.XYs{{X: e.AtMs / 1000, Y: 0}, {X: e.AtMs / 1000, Y: yMax * 1.05}})
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		mark.Color = c
		mark.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(mark)
		if !named[e.Name] {
			named[e.Name] = true
			p.Legend.Add(e.Name, mark)
		}
	}
	p.Legend.Top = true
	p.Y.Min = 0
	return p, nil
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
