package bus

import (
	"slices"
	"testing"
)

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"nova.evt.*.node.completed", "nova.evt.x.node.completed", true},
		{"nova.evt.*.node.completed", "nova.evt.x.node.started", false},
		{"nova.evt.*.node.completed", "nova.evt.x.node.completed.more", false},
		{"nova.evt.*.node.completed", "nova.evt.x.node", false},
		{"nova.evt.x.>", "nova.evt.x.events.run", true},
		{"nova.evt.x.>", "nova.evt.x", false},
		{"nova.evt.*.result.>", "nova.evt.x.result.sandbox", true},
		{"nova.evt.*.events.*", "nova.evt.x.events.start", true},
		{"nova.evt.*.events.start", "nova.evt.x.events.run", false},
		{">", "a", true},
	} {
		if got := subjectMatches(c.filter, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}

func TestWithEnvelopes(t *testing.T) {
	for _, c := range []struct{ filters, want []string }{
		{nil, nil},
		{[]string{"nova.evt.*.result.>"}, []string{"nova.evt.*.result.>"}},
		{[]string{"nova.evt.*.workflow.completed"}, []string{"nova.evt.*.workflow.completed"}},
		{[]string{"nova.evt.*.workflow.started", "nova.evt.*.workflow.completed"},
			[]string{"nova.evt.*.workflow.started", "nova.evt.*.workflow.completed", "nova.evt.*.events.start"}},
		{[]string{"nova.evt.*.workflow.started", "nova.evt.*.node.completed", "nova.evt.*.step.completed"},
			[]string{"nova.evt.*.workflow.started", "nova.evt.*.node.completed", "nova.evt.*.step.completed", "nova.evt.*.events.*"}},
		{[]string{"nova.evt.x.node.started", "nova.evt.y.node.started"},
			[]string{"nova.evt.x.node.started", "nova.evt.y.node.started", "nova.evt.x.events.*", "nova.evt.y.events.*"}},
		{[]string{"nova.evt.x.>"}, []string{"nova.evt.x.>"}},
		{[]string{"nova.evt.x.node.started", "nova.evt.x.>"}, []string{"nova.evt.x.node.started", "nova.evt.x.>"}},
	} {
		if got := withEnvelopes(c.filters); !slices.Equal(got, c.want) {
			t.Errorf("withEnvelopes(%v) = %v, want %v", c.filters, got, c.want)
		}
	}
}
