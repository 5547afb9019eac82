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

// eventColors gives each kind of event on the timeline its marker colour; an event without one (a
// profile not saved) is not drawn.
var eventColors = map[string]color.RGBA{
	EventKill:       {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	EventAssignment: {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	EventRestart:    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	EventPause:      {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	EventResume:     {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	EventCaughtUp:   {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	EventRejoined:   {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// gapShade is the fill of a span with nothing confirmed that a fault opened (kill to the first
// confirm at a newer epoch, SIGSTOP to the first confirm of a record appended after it); idleShade
// of any other stretch of at least two points (200 ms) with nothing confirmed.
var (
	gapShade  = color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0x50}
	idleShade = color.NRGBA{R: 0x80, G: 0x80, B: 0x80, A: 0x40}
)

// span is a stretch of the timeline, in seconds since the start of load.
type span struct{ from, to float64 }

// WritePlot draws throughput and p99 latency over time, one panel each, with the run's events
// marked and its gaps shaded, to path: SVG for a .svg name, PNG otherwise.
func (r *Report) WritePlot(path string) error {
	tp, err := r.timelinePlot("throughput (records/s)", throughputLine(r.Timeline), true)
	if err != nil {
		return err
	}
	lp, err := r.timelinePlot("p99 latency (ms)", latencySegments(r.Timeline), false)
	if err != nil {
		return err
	}
	tp.Title.Text = fmt.Sprintf("ringstream bench: %d nodes, %s stream (%d copies, %s), %d producers",
		r.Config.Nodes, r.Config.Stream, r.Config.Copies, r.Config.Policy, r.Config.Producers)
	lp.Title.Text = "p99 of each 100 ms of confirmations (none drawn where nothing was confirmed)"
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

// throughputLine is the throughput over the timeline, one line (0 where nothing was confirmed).
func throughputLine(tl []Point) []plotter.XYs {
	xys := make(plotter.XYs, len(tl))
	for i, pt := range tl {
		xys[i] = plotter.XY{X: pt.AtMs / 1000, Y: pt.RecordsPerSec}
	}
	return []plotter.XYs{xys}
}

// latencySegments is the p99 latency over the timeline, broken where a point has none: one series
// per run of points with confirmations.
func latencySegments(tl []Point) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for _, pt := range tl {
		if pt.P99Ms == nil {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: pt.AtMs / 1000, Y: *pt.P99Ms})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// gaps is the report's spans with nothing confirmed that a fault opened: from each owner kill to the
// end of the failover gap, and from a SIGSTOP to the end of the stall; a gap that never ended runs to
// the end of the timeline.
func (r *Report) gaps() []span {
	end := 0.0
	if n := len(r.Timeline); n > 0 {
		end = (r.Timeline[n-1].AtMs + float64(BucketWidth.Milliseconds())) / 1000
	}
	var out []span
	add := func(name, note string, length *float64) {
		for _, e := range r.Events {
			if e.Name != name || !strings.HasPrefix(e.Note, note) {
				continue
			}
			to := end
			if length != nil {
				to = (e.AtMs + *length) / 1000
			}
			out = append(out, span{from: e.AtMs / 1000, to: max(to, e.AtMs/1000)})
			return
		}
	}
	if r.Config.KillOwnerAt > 0 {
		add(EventKill, ownerKillNote, r.FailoverGapMs)
	}
	if r.Config.PauseOwnerAt > 0 {
		add(EventPause, "", r.StallMs)
	}
	return out
}

// unconfirmed is every stretch of at least two timeline points with nothing confirmed that no gap
// of gaps covers: the stalls no fault was expected to open.
func (r *Report) unconfirmed(gaps []span) []span {
	width := BucketWidth.Seconds()
	var out []span
	flush := func(s span, n int) {
		if n < 2 {
			return
		}
		for _, g := range gaps {
			if s.from < g.to+width && s.to > g.from-width { // touches a fault's gap: part of it
				return
			}
		}
		out = append(out, s)
	}
	var cur span
	n := 0
	for _, pt := range r.Timeline {
		at := pt.AtMs / 1000
		if pt.RecordsPerSec == 0 {
			if n == 0 {
				cur.from = at
			}
			cur.to, n = at+width, n+1
			continue
		}
		flush(cur, n)
		n = 0
	}
	flush(cur, n)
	return out
}

// timelinePlot is one panel: the series over the timeline in seconds, the gaps shaded under them and
// a vertical line per event; legend puts the legend (with room for it above the series).
func (r *Report) timelinePlot(ylabel string, series []plotter.XYs, legend bool) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "time since the start of load (s)"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	yMax := 1.0
	for _, xys := range series {
		for _, xy := range xys {
			yMax = max(yMax, xy.Y)
		}
	}
	top := yMax * 1.05
	if legend {
		top = yMax * 1.45
	}
	xMax := 0.0
	if n := len(r.Timeline); n > 0 {
		xMax = (r.Timeline[n-1].AtMs + float64(BucketWidth.Milliseconds())) / 1000
	}
	gaps := r.gaps()
	for _, shading := range []struct {
		spans []span
		color color.Color
		name  string
	}{
		{gaps, gapShade, "fault's gap: no confirm"},
		{r.unconfirmed(gaps), idleShade, "no confirm"},
	} {
		for i, g := range shading.spans {
			shade, err := plotter.NewPolygon(plotter.XYs{{X: g.from, Y: 0}, {X: g.to, Y: 0}, {X: g.to, Y: top},
				{X: g.from, Y: top}})
			if err != nil {
				return nil, fmt.Errorf("bench: plot: %w", err)
			}
			shade.Color, shade.LineStyle.Width = shading.color, 0
			p.Add(shade)
			if i == 0 && legend {
				p.Legend.Add(shading.name, shade)
			}
		}
	}
	for _, xys := range series {
		if len(xys) == 1 { // a lone point draws no line: mark it
			dot, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, fmt.Errorf("bench: plot: %w", err)
			}
			dot.GlyphStyle.Radius = vg.Points(1.5)
			p.Add(dot)
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		p.Add(line)
	}
	named := map[string]bool{}
	for _, e := range r.Events {
		c, ok := eventColors[e.Name]
		if !ok {
			continue
		}
		mark, err := plotter.NewLine(plotter.XYs{{X: e.AtMs / 1000, Y: 0}, {X: e.AtMs / 1000, Y: top}})
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		mark.Color = c
		mark.Width = vg.Points(1.2)
		mark.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(mark)
		xMax = max(xMax, e.AtMs/1000)
		if legend && !named[e.Name] {
			named[e.Name] = true
			p.Legend.Add(e.Name, mark)
		}
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, top
	p.X.Min, p.X.Max = 0, xMax*1.01
	return p, nil
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
