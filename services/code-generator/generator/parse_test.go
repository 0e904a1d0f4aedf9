package generator

import "testing"

func TestExtractCode(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		want   string
	}{
		{"python fence", "Here you go:\n```python\n# STAGE: TASK\ncontext['x'] = 1\n```\nDone.", "# STAGE: TASK\ncontext['x'] = 1\n"},
		{"py fence", "```py\nx = 1\ncontext['y'] = x\n```", "x = 1\ncontext['y'] = x\n"},
		{"untagged fence", "```\ncontext['x'] = 2\n```", "context['x'] = 2\n"},
		{"first python block wins", "```python\ncontext['a'] = 1\n```\nor\n```python\ncontext['b'] = 2\n```", "context['a'] = 1\n"},
		{"json block skipped", "```json\n{\"a\": 1}\n```\n```python\ncontext['a'] = 1\n```", "context['a'] = 1\n"},
		{"unterminated fence", "```python\n# STAGE: TASK\ncontext['x'] = 1\n", "# STAGE: TASK\ncontext['x'] = 1\n"},
		{"crlf", "```python\r\ncontext['x'] = 1\r\n```", "context['x'] = 1\n"},
		{"bare code", "# STAGE: TASK\ntotal = context['total']\ncontext['discount'] = total * 0.1", "# STAGE: TASK\ntotal = context['total']\ncontext['discount'] = total * 0.1\n"},
		{"bare import", "import json\nprint(json.dumps({}))", "import json\nprint(json.dumps({}))\n"},
		{"prose", "I'm sorry, I cannot help with that request.", ""},
		{"empty", "   \n", ""},
		{"marker only", "```python\n# STAGE: TASK\n```", ""},
		{"empty fence", "```python\n```", ""},
		{"other language only", "```javascript\ncontext.x = 1\n```", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := extractCode(tt.answer); got != tt.want {
				t.Errorf("extractCode(%q) = %q, want %q", tt.answer, got, tt.want)
			}
		})
	}
}

func TestDetectStage(t *testing.T) {
	tests := []struct {
		code string
		want string
	}{
		{"# STAGE: ANALYSIS\nx = 1\n", StageAnalysis},
		{"# STAGE: TASK\nx = 1\n", StageTask},
		{"#stage:analysis\nx = 1\n", StageAnalysis},
		{"import base64\n  # STAGE: ANALYSIS\n", StageAnalysis},
		{"x = 1\n", StageTask},
		{"x = '# STAGE: ANALYSIS'\n", StageTask},
	}
	for _, tt := range tests {
		if got := detectStage(tt.code); got != tt.want {
			t.Errorf("detectStage(%q) = %q, want %q", tt.code, got, tt.want)
		}
	}
}

func TestElideEncoded(t *testing.T) {
	run := ""
	for range 30 {
		run += "QUJDREVGR0g"
	}
	got := elideEncoded("binascii.Error: bad data " + run + "== at line 3")
	want := "binascii.Error: bad data [encoded data, 332 chars, left out] at line 3"
	if got != want {
		t.Errorf("elideEncoded = %q, want %q", got, want)
	}
}
