package benchd

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// Pct is the p-th percentile of ds by nearest rank (0 for no samples).
func Pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// Ms formats d in milliseconds, with decimals only where they matter.
func Ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f ms", f)
	case f >= 1:
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.3f ms", f)
}

// Table prints rows of n, p50 and p95 under a title, the measured side
// and its baseline one above the other.
type Table struct {
	W     io.Writer
	Width int // of the name column; 0 means 44
}

func (t Table) width() int {
	if t.Width == 0 {
		return 44
	}
	return t.Width
}

// Head prints the title line with the column names.
func (t Table) Head(title string) {
	fmt.Fprintf(t.W, "  %-*s %5s %10s %10s\n", t.width(), title, "n", "p50", "p95")
}

// Row prints one row of samples.
func (t Table) Row(name string, ds []time.Duration) {
	fmt.Fprintf(t.W, "  %-*s %5d %10s %10s\n", t.width(), name, len(ds), Ms(Pct(ds, 50)), Ms(Pct(ds, 95)))
}

// Note prints a line under the table's name column (a ratio, a rate).
func (t Table) Note(name, value string) {
	fmt.Fprintf(t.W, "  %-*s %5s %10s\n", t.width(), name, "", value)
}

// Ratio prints the p50 of a over the p50 of b.
func (t Table) Ratio(name string, a, b []time.Duration) {
	t.Note(name, fmt.Sprintf("%.2fx", float64(Pct(a, 50))/float64(max(Pct(b, 50), 1))))
}
