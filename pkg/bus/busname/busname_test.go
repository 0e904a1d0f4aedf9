package busname

import "testing"

func TestResultSubject(t *testing.T) {
	for _, c := range []struct {
		kind, want string
		ok         bool
	}{
		{"", "nova.evt.e1.result.sandbox", true},
		{"reply.sandbox", "nova.evt.e1.reply.sandbox", true},
		{"reply.gateway-7", "nova.evt.e1.reply.gateway-7", true},
		{"workflow.completed", "", false},
		{"result.sandbox", "", false},
		{"reply.", "", false},
		{"reply.a.b", "", false},
		{"reply.>", "", false},
		{"reply.*", "", false},
	} {
		got, err := ResultSubject("e1", AgentSandbox, c.kind)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ResultSubject(e1, sandbox, %q) = %q, %v; want %q, ok=%v", c.kind, got, err, c.want, c.ok)
		}
	}
}

func TestEventKind(t *testing.T) {
	for _, c := range []struct{ id, subject, want string }{
		{"e1", EventSubject("e1", KindNodeStarted), KindNodeStarted},
		{"a.b", EventSubject("a.b", KindWorkflowCompleted), KindWorkflowCompleted},
		{"e1", EventSubject("e1", ReplyKind(AgentSandbox)), "reply.sandbox"},
		{"e1", EventSubject("e2", KindNodeStarted), ""},
	} {
		if got := EventKind(c.id, c.subject); got != c.want {
			t.Errorf("EventKind(%q, %q) = %q, want %q", c.id, c.subject, got, c.want)
		}
	}
}

func TestParseEventSubject(t *testing.T) {
	for _, c := range []struct {
		subject, execution, kind string
		ok                       bool
	}{
		{EventSubject("e1", KindNodeStarted), "e1", KindNodeStarted, true},
		{EventSubject("a.b", ReplyKind(AgentSandbox)), "a_b", "reply.sandbox", true},
		{CommandSubject(AgentSandbox), "", "", false},
		{"nova.evt.e1", "", "", false},
		{"nova.evt..node.started", "", "", false},
	} {
		execution, kind, ok := ParseEventSubject(c.subject)
		if execution != c.execution || kind != c.kind || ok != c.ok {
			t.Errorf("ParseEventSubject(%q) = %q, %q, %v; want %q, %q, %v", c.subject, execution, kind, ok, c.execution, c.kind, c.ok)
		}
	}
	if !IsReplyKind(ReplyKind(AgentCodeGenerator)) || IsReplyKind(ResultKind(AgentSandbox)) {
		t.Error("IsReplyKind tells replies from results wrongly")
	}
}
