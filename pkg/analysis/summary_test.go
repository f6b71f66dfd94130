package analysis

import (
	"math"
	"strings"
	"testing"
)

func TestSummaryIsOneLine(t *testing.T) {
	v := errorVerdict(errString("line one\nline two"), "5m", nil)
	if strings.Contains(v.Summary, "\n") || v.Summary != "Error: line one line two" {
		t.Fatalf("summary %q", v.Summary)
	}
	if ms(math.NaN()) != "NaN" || ms(1500) != "1.50s" || ms(0.5) != "0.500ms" || ms(123.4) != "123ms" || ms(60) != "60.0ms" {
		t.Fatalf("ms formatting: %s %s %s %s", ms(math.NaN()), ms(1500), ms(0.5), ms(123.4))
	}
}
