package devstack

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A logger of the stack's servers drops records below its level and writes
// the others with every attribute and group it was given, in order.
func TestMinLevelHandlerKeepsAttrsAndGroups(t *testing.T) {
	var buf bytes.Buffer
	text := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		}})
	log := slog.New(minLevelHandler{min: slog.LevelError, next: text}).With("component", "ferretdb")
	a := log.With("a", 1).WithGroup("g").With("b", 2)
	b := log.With("other", true) // a sibling shares no attributes with a
	a.Info("dropped", "c", 0)
	a.Error("kept", "c", 3)
	b.Error("also kept")
	want := "level=ERROR msg=kept component=ferretdb a=1 g.b=2 g.c=3\n" +
		"level=ERROR msg=\"also kept\" component=ferretdb other=true\n"
	if got := buf.String(); got != want {
		t.Errorf("logged\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(buf.String(), "dropped") {
		t.Error("a record below the level was written")
	}
}
