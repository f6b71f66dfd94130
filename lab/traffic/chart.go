package traffic

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/danki-dev/danki/pkg/latency"
)

// ChartPanel is one scenario on the latency chart.
type ChartPanel struct {
	// Name titles the panel.
	Name    string
	Samples []Sample
	// Markers become labelled vertical lines.
	Markers []Marker
	// Start is time zero of the panel's x axis. Zero means the earliest
	// sample. Samples and markers before Start are left out.
	Start time.Time
}

// ChartFormat is the image format of a chart.
type ChartFormat string

const (
	SVG ChartFormat = "svg"
	PNG ChartFormat = "png"
)

// Chart dimensions: panels are stacked, all the same size.
const (
	chartWidth       = 10 * vg.Inch
	chartPanelHeight = 3.2 * vg.Inch
	chartDPI         = 120
)

// WriteChart draws user latency over time, one panel per ChartPanel stacked
// top to bottom: per-second p50, p99 and max in milliseconds on a log scale,
// red crosses at seconds with failed requests, and a dashed line per marker
// with its label. All panels share the x (seconds since Start) and y ranges,
// so a spike in one compares directly with the calm of another.
func WriteChart(w io.Writer, f ChartFormat, panels []ChartPanel) error {
	if len(panels) == 0 {
		return errors.New("write chart: no panels; pass at least one scenario's samples")
	}
	if f != SVG && f != PNG {
		return fmt.Errorf("write chart: format %q is not supported; use %q or %q", f, SVG, PNG)
	}
	plots, err := chartPlots(panels)
	if err != nil {
		return err
	}
	height := chartPanelHeight * vg.Length(len(panels))
	var c vg.CanvasWriterTo
	if f == SVG {
		c = vgsvg.New(chartWidth, height)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(chartWidth, height), vgimg.UseDPI(chartDPI))}
	}
	dc := draw.New(c)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(12)}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("write %s chart: %w", f, err)
	}
	return nil
}

// SaveChart writes the chart to path, as SVG or PNG by the file extension.
func SaveChart(path string, panels []ChartPanel) (err error) {
	var f ChartFormat
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		f = SVG
	case ".png":
		f = PNG
	default:
		return fmt.Errorf("save chart %s: unknown extension %q; use .svg or .png", path, filepath.Ext(path))
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("save chart: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("save chart: %w", cerr)
		}
	}()
	return WriteChart(out, f, panels)
}

// second is one second of a panel: latencies in milliseconds.
type second struct {
	x             float64 // seconds since the panel's start, middle of the second
	p50, p99, max float64
	errors        int
}

// minChartMs keeps latencies positive on the log axis.
const minChartMs = 0.001

func perSecond(samples []Sample, origin time.Time) []second {
	var lats [][]time.Duration // per second
	var errs []int
	for _, s := range samples {
		if s.Start.Before(origin) {
			continue
		}
		i := int(s.Start.Sub(origin) / time.Second)
		if i >= len(lats) {
			lats = append(lats, make([][]time.Duration, i+1-len(lats))...)
			errs = append(errs, make([]int, i+1-len(errs))...)
		}
		lats[i] = append(lats[i], s.Latency)
		if !s.OK() {
			errs[i]++
		}
	}
	ms := func(d time.Duration) float64 { return max(float64(d)/float64(time.Millisecond), minChartMs) }
	var out []second
	for i, lat := range lats {
		if len(lat) == 0 {
			continue
		}
		sum := latency.Summarize(lat, errs[i])
		out = append(out, second{x: float64(i) + 0.5, p50: ms(sum.P50), p99: ms(sum.P99), max: ms(sum.Max), errors: sum.Errors})
	}
	return out
}

func chartPlots(panels []ChartPanel) ([]*plot.Plot, error) {
	type panelData struct {
		origin  time.Time
		seconds []second
	}
	data := make([]panelData, len(panels))
	xmax, ymin, ymax := 1.0, math.Inf(1), math.Inf(-1)
	for i, p := range panels {
		origin := p.Start
		if origin.IsZero() {
			for _, s := range p.Samples {
				if origin.IsZero() || s.Start.Before(origin) {
					origin = s.Start
				}
			}
		}
		secs := perSecond(p.Samples, origin)
		data[i] = panelData{origin, secs}
		for _, s := range secs {
			xmax = max(xmax, s.x+0.5)
			ymin, ymax = min(ymin, s.p50), max(ymax, s.max)
		}
		for _, m := range p.Markers {
			if !origin.IsZero() && !m.At.Before(origin) {
				xmax = max(xmax, m.At.Sub(origin).Seconds())
			}
		}
	}
	if math.IsInf(ymin, 0) { // no samples at all
		ymin, ymax = 1, 10
	}
	// Whole decades, with headroom above the highest line for marker labels.
	lo := math.Pow(10, math.Floor(math.Log10(ymin)))
	hi := math.Pow(10, math.Ceil(math.Log10(ymax*4)))

	plots := make([]*plot.Plot, len(panels))
	for i, p := range panels {
		pl, err := panelPlot(p, data[i].origin, data[i].seconds, xmax, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("chart panel %q: %w", p.Name, err)
		}
		plots[i] = pl
	}
	return plots, nil
}

var (
	colorP50    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorP99    = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colorMax    = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorError  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorMarker = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
)

func panelPlot(p ChartPanel, origin time.Time, secs []second, xmax, ylo, yhi float64) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Name
	pl.X.Label.Text = "seconds since start"
	pl.Y.Label.Text = "latency, ms (log)"
	pl.X.Min, pl.X.Max = 0, xmax
	pl.Y.Min, pl.Y.Max = ylo, yhi
	pl.Y.Scale = plot.LogScale{}
	pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	pl.Add(plotter.NewGrid())
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Legend.XOffs, pl.Legend.YOffs = vg.Points(6), -vg.Points(4) // inside the data area
	pl.Legend.TextStyle.Font.Size = vg.Points(8)

	// Drawn max first so the lower lines stay visible where they meet;
	// listed p50, p99, max in the legend.
	series := []struct {
		name  string
		value func(second) float64
		color color.Color
		width float64
	}{
		{"max", func(s second) float64 { return s.max }, colorMax, 1},
		{"p99", func(s second) float64 { return s.p99 }, colorP99, 1.5},
		{"p50", func(s second) float64 { return s.p50 }, colorP50, 1.5},
	}
	lines := make([]*plotter.Line, len(series))
	for i, sr := range series {
		if len(secs) == 0 {
			break
		}
		xys := make(plotter.XYs, len(secs))
		for j, s := range secs {
			xys[j] = plotter.XY{X: s.x, Y: sr.value(s)}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width = sr.color, vg.Points(sr.width)
		pl.Add(line)
		lines[i] = line
	}
	for i := len(series) - 1; i >= 0 && lines[i] != nil; i-- {
		pl.Legend.Add(series[i].name, lines[i])
	}

	var errXYs plotter.XYs
	for _, s := range secs {
		if s.errors > 0 {
			errXYs = append(errXYs, plotter.XY{X: s.x, Y: s.max})
		}
	}
	if len(errXYs) > 0 {
		sc, err := plotter.NewScatter(errXYs)
		if err != nil {
			return nil, err
		}
		sc.Shape, sc.Color, sc.Radius = draw.CrossGlyph{}, colorError, vg.Points(3)
		pl.Add(sc)
		pl.Legend.Add("errors", sc)
	}

	if err := addMarkers(pl, p.Markers, origin, ylo, yhi); err != nil {
		return nil, err
	}
	return pl, nil
}

// addMarkers draws a dashed vertical line per marker with its label written
// upwards along the line, ending just below the top of the panel.
func addMarkers(pl *plot.Plot, markers []Marker, origin time.Time, ylo, yhi float64) error {
	var pts plotter.XYs
	var labels []string
	for _, m := range markers {
		if origin.IsZero() || m.At.Before(origin) {
			continue
		}
		x := m.At.Sub(origin).Seconds()
		line, err := plotter.NewLine(plotter.XYs{{X: x, Y: ylo}, {X: x, Y: yhi}})
		if err != nil {
			return err
		}
		line.Color, line.Width, line.Dashes = colorMarker, vg.Points(0.75), []vg.Length{vg.Points(3), vg.Points(3)}
		pl.Add(line)
		pts = append(pts, plotter.XY{X: x, Y: yhi / 1.15})
		labels = append(labels, m.Label)
	}
	if len(pts) == 0 {
		return nil
	}
	lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
	if err != nil {
		return err
	}
	for i := range lbl.TextStyle {
		lbl.TextStyle[i] = text.Style{
			Color:    colorMarker,
			Font:     font.From(plotter.DefaultFont, vg.Points(7)),
			Rotation: math.Pi / 2,
			XAlign:   draw.XRight,
			YAlign:   draw.YBottom,
			Handler:  pl.TextHandler,
		}
	}
	lbl.Offset = vg.Point{X: -vg.Points(1)}
	pl.Add(plotOnly{lbl})
	return nil
}

// plotOnly hides a plotter's glyph boxes: the plot would otherwise shrink its
// data area to make room for the (unrotated) extent of the marker labels.
type plotOnly struct{ p plot.Plotter }

func (o plotOnly) Plot(c draw.Canvas, p *plot.Plot) { o.p.Plot(c, p) }
