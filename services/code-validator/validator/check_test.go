package validator_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/services/code-validator/validator"
)

const python = "/usr/bin/python3"

var (
	runtimeOnce sync.Once
	runtimeDesc *runtimeinfo.Info
	runtimeErr  error
)

// sandboxRuntime describes the real runtime: its module list is what the
// installed-module check compares with (documentation of fitz only, for speed).
func sandboxRuntime(t *testing.T) *runtimeinfo.Info {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s: %v", python, err)
	}
	runtimeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runtimeDesc, runtimeErr = runtimeinfo.Generate(ctx, python, runtimeinfo.WithLibraries(runtimeinfo.LibrarySpec{Name: "fitz"}))
	})
	if runtimeErr != nil {
		t.Fatal(runtimeErr)
	}
	return runtimeDesc
}

// want is an expected finding: its rule, line, and words of its message.
type want struct {
	rule string
	line int
	says string
}

type checkCase struct {
	name   string
	code   string
	keys   []string
	node   string // "decision" for decision nodes
	values []string
	stage  string
	want   []want
}

func run(t *testing.T, tc checkCase) []validator.Finding {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := validator.Check(ctx, validator.Input{
		Code:           tc.code,
		Stage:          tc.stage,
		NodeType:       tc.node,
		DecisionValues: tc.values,
		ContextKeys:    tc.keys,
		Runtime:        sandboxRuntime(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func verify(t *testing.T, tc checkCase, got []validator.Finding) {
	t.Helper()
	ok := len(got) == len(tc.want)
	for i := 0; ok && i < len(got); i++ {
		w := tc.want[i]
		ok = got[i].Rule == w.rule && got[i].Line == w.line && strings.Contains(got[i].Message, w.says)
	}
	if !ok {
		var b strings.Builder
		for _, f := range got {
			fmt.Fprintf(&b, "\n  %s line %d: %s", f.Rule, f.Line, f.Message)
		}
		t.Errorf("findings:%s\nwant: %+v\ncode:\n%s", b.String(), tc.want, tc.code)
	}
}

// validPrograms must pass without a single finding: a false alarm costs a
// generation attempt.
var validPrograms = []checkCase{
	{name: "discount", keys: []string{"total"}, code: `
total = context['total']
discount = total * 0.1 if total > 1000 else 0
context['discount'] = discount
context['final_total'] = total - discount
`},
	{name: "demo discount (scripted model)", keys: []string{"total"}, code: `# STAGE: TASK
total = float(context['total'])
discount_rate = 0.10 if total > 1000 else 0.0
context['discount'] = round(total * discount_rate, 2)
context['final_total'] = round(total - context['discount'], 2)
`},
	{name: "demo currency with decimal (scripted model)", keys: []string{"total", "final_total"}, code: `# STAGE: TASK
from decimal import Decimal, ROUND_HALF_UP
amount = Decimal(str(context.get('final_total', context.get('total', 0))))
context['formatted_total'] = f"{amount.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,} EUR"
`},
	{name: "pdf invoice with fitz", keys: []string{"pdf_data_b64"}, code: `# STAGE: TASK
import base64
import fitz  # PyMuPDF
import re

pdf_bytes = base64.b64decode(context['pdf_data_b64'])
doc = fitz.open(stream=pdf_bytes, filetype="pdf")
text = ""
for page in doc:
    text += page.get_text()
match = re.search(r'Total[:\s]+\$?([\d,]+\.?\d*)', text, re.IGNORECASE)
context['total_amount'] = float(match.group(1).replace(',', '')) if match else None
context['extraction_status'] = 'success' if match else 'not_found'
`},
	{name: "pdf analysis stage", keys: []string{"pdf_data_b64"}, code: `# STAGE: ANALYSIS
import base64
import fitz

pdf_bytes = base64.b64decode(context['pdf_data_b64'])
doc = fitz.open(stream=pdf_bytes, filetype="pdf")
result = {
    "type": "pdf",
    "pages": len(doc),
    "has_text_layer": bool(doc[0].get_text().strip()),
    "file_size_kb": len(pdf_bytes) // 1024,
}
context['_data_analysis'] = result
`},
	{name: "pandas", keys: []string{"csv"}, code: `
import io
import pandas as pd
import numpy as np

df = pd.read_csv(io.StringIO(context['csv']))
df['amount'] = pd.to_numeric(df['amount'], errors='coerce').fillna(0)
summary = df.groupby('region')['amount'].sum().to_dict()
top = max(summary, key=summary.get)
context['summary'] = {k: float(v) for k, v in summary.items()}
context['top_region'] = top
context['mean'] = float(np.mean(df['amount'].values))
`},
	{name: "requests, bs4, PIL, openpyxl, pypdf imports", keys: []string{"url"}, code: `
import requests
from bs4 import BeautifulSoup
from PIL import Image
import openpyxl
from pypdf import PdfReader
from lxml import etree
from datetime import datetime, timedelta
from collections import Counter, defaultdict
import itertools, statistics, csv, base64, io, os.path

resp = requests.get(context['url'], timeout=10)
soup = BeautifulSoup(resp.text, 'html.parser')
links = [a.get('href') for a in soup.find_all('a') if a.get('href')]
counts = Counter(os.path.splitext(l)[1] for l in links)
groups = defaultdict(list)
for link in links:
    groups[link[:10]].append(link)
context['links'] = links
context['counts'] = dict(counts)
context['when'] = (datetime.now() + timedelta(days=1)).isoformat()
context['median'] = statistics.median([len(l) for l in links] or [0])
`},
	{name: "functions, recursion, closures, nonlocal", keys: []string{"n"}, code: `
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def make_counter(start=0):
    count = start
    def inc(step=1):
        nonlocal count
        count += step
        return count
    return inc

counter = make_counter()
counter()
context['fib'] = [fib(i) for i in range(context['n'])]
context['count'] = counter(2)
`},
	{name: "function calls one defined after it", code: `
def main():
    return helper(2)

def helper(x):
    return x * 2

context['v'] = main()
`},
	{name: "try except else finally in a loop", keys: []string{"items"}, code: `
items = context['items']
result = None
for attempt in range(3):
    try:
        value = float(items[attempt])
    except (ValueError, IndexError) as exc:
        last_error = str(exc)
        continue
    else:
        result = value
        break
    finally:
        tried = attempt + 1
context['result'] = result
context['tried'] = tried
`},
	{name: "loop reads what the previous iteration assigned", code: `
i = 0
while i < 3:
    if i > 0:
        print(prev)
    prev = i
    i += 1
for row in [[1, 2], [3, 4]]:
    if row[0] > 1:
        context['delta'] = row[0] - last
    last = row[0]
context['last'] = prev
`},
	{name: "classes, properties, global, lambda, walrus, with, f-strings", keys: []string{"amounts"}, code: `
import json
COUNT = 0

class Invoice:
    tax_rate = 0.2
    rates = [tax_rate, 0.1]
    upper = [r * 2 for r in rates]

    def __init__(self, amount):
        self.amount = amount

    def total(self):
        return self.amount * (1 + self.tax_rate)

    @property
    def label(self):
        return f"Invoice of {self.amount:.2f} ({self.total()!r})"

def bump():
    global COUNT
    COUNT += 1

invoices = [Invoice(a) for a in context['amounts']]
for inv in invoices:
    bump()
ordered = sorted(invoices, key=lambda i: i.total(), reverse=True)
if (n := len(ordered)) > 0:
    context['biggest'] = ordered[0].label
context['n'] = n
context['count'] = COUNT
context['report'] = json.dumps({"count": COUNT, "labels": [i.label for i in ordered]})
with open('/tmp/out.txt', 'w') as fh, open('/tmp/log.txt', 'a') as log:
    fh.write(context['report'])
    log.write(f"{len(ordered)=}")
`},
	{name: "comprehensions and a lazy generator", keys: []string{"data"}, code: `
data = context['data']
pairs = {k: v for k, v in data.items() if v}
flat = [y for x in [[1, 2], [3]] for y in x]
squares = {x * x for x in flat}
picked = [y for x in flat if (y := x * 2) > 2]
gen = (x * factor for x in flat)
factor = 3
context['out'] = {"pairs": pairs, "sum": sum(gen), "squares": sorted(squares), "picked": picked}
context['any'] = any(v > 1 for v in flat)
`},
	{name: "match statement", keys: []string{"kind"}, code: `
match context['kind']:
    case 'a' | 'b' as k:
        label = k
    case {'type': t, **rest}:
        label = t + str(len(rest))
    case [first, *others]:
        label = str(first) + str(others)
    case _:
        label = 'unknown'
context['label'] = label
`},
	{name: "prelude modules without import", keys: []string{"raw", "when"}, code: `
data = json.loads(context['raw'])
context['root'] = math.sqrt(data['n'])
context['digits'] = re.findall(r'\d+', context['raw'])
context['year'] = datetime.date.fromisoformat(context['when']).year
`},
	{name: "keys the code sets before reading them", keys: []string{"price"}, code: `
context['subtotal'] = context['price'] * 2
context['total'] = context['subtotal'] + 1
context.update({'tax': 0.2, 'currency': 'EUR'})
context.update(shipping=5)
context.setdefault('log', [])
context['log'].append(context['tax'] * context['total'] + context['shipping'])
context |= {'done': True}
context['summary'] = f"{context['currency']} {context['done']}"
`},
	{name: "guarded and tolerant context reads", keys: []string{"a"}, code: `
if 'optional' in context:
    x = context['optional']
else:
    x = context.get('other', 0)
try:
    y = context['maybe']
except KeyError:
    y = None
z = context.pop('gone', None)
context['out'] = [x, y, z, context['a']]
`},
	{name: "keys written dynamically are not followed", keys: []string{"a"}, code: `
for k in ['b', 'c']:
    context[k] = 0
context['d'] = context['b'] + context['c']
`},
	{name: "context handed to the code's own function", code: `
def fill(ctx):
    ctx['x'] = 1
fill(context)
context['y'] = context['x']
`},
	{name: "key set in a function read later", code: `
def prepare():
    context['ready'] = True
prepare()
context['ok'] = context['ready']
`},
	{name: "decision node assigns through a variable", node: "decision", values: []string{"manager_approval", "auto_approve"}, keys: []string{"amount"}, code: `
amount = context['amount']
if amount > 1000:
    decision = 'manager_approval'
else:
    decision = 'auto_approve'
context['branch_decision'] = decision
`},
	{name: "decision node with update", node: "decision", values: []string{"yes", "no"}, code: `
context.update(branch_decision='yes' if context.get('x') else 'no')
`},
	{name: "demo decision (scripted model)", node: "decision", values: []string{"true", "false"}, keys: []string{"total", "final_total"}, code: `# STAGE: TASK
total = float(context.get('final_total', context['total']))
context['branch_decision'] = 'true' if total > 1000 else 'false'
`},
	{name: "decision node analysis stage need not decide", node: "decision", values: []string{"a"}, stage: "ANALYSIS", code: `
context['_data_analysis'] = {'n': 1}
`},
	{name: "decision node analysis stage by marker", node: "decision", values: []string{"a"}, code: `# STAGE: ANALYSIS
context['_data_analysis'] = {'n': 1}
`},
	{name: "decision value computed at run time", node: "decision", values: []string{"a", "b"}, keys: []string{"choice"}, code: `
context['branch_decision'] = context['choice'].strip().lower()
`},
	{name: "future annotations, dunder names, del, exception names", code: `
from __future__ import annotations

def f(x: DataFrame) -> Optional[int]:
    return 1

tmp = 1
del tmp
try:
    raise ValueError('x')
except ValueError as e:
    context['error'] = str(e)
if __name__ == '__main__':
    context['main'] = f(None)
`},
	{name: "conditional import fallback", code: `
try:
    import pandas as pd
except ImportError:
    pd = None
context['has_pandas'] = pd is not None
`},
	{name: "builtins rebound after use", code: `
values = list(range(3))
total = sum(values)
context['n'] = len(values)
list = None
`},
	{name: "exec and star imports make names unknowable", code: `
from math import *
exec('y = 1')
context['r'] = sqrt(4) + y
`},
	{name: "empty program", code: ""},
	{name: "comments only", code: "# STAGE: TASK\n# nothing to do\n"},
}

func TestValidProgramsHaveNoFindings(t *testing.T) {
	for _, tc := range validPrograms {
		t.Run(tc.name, func(t *testing.T) {
			verify(t, tc, run(t, tc))
		})
	}
}

var brokenPrograms = []checkCase{
	// 1. syntax
	{name: "missing colon", code: "total = 1\nif total > 1000\n    context['x'] = 1\n",
		want: []want{{validator.RuleSyntax, 2, "expected ':' (line 2"}}},
	{name: "unclosed bracket", code: "x = [1, 2\ncontext['x'] = x\n",
		want: []want{{validator.RuleSyntax, 1, "never closed"}}},
	{name: "bad indentation", code: "for i in range(3):\ncontext['i'] = i\n",
		want: []want{{validator.RuleSyntax, 2, "IndentationError"}}},
	{name: "return outside function", code: "context['x'] = 1\nreturn context\n",
		want: []want{{validator.RuleSyntax, 2, "'return' outside function"}}},
	{name: "await outside async", code: "import asyncio\nawait asyncio.sleep(1)\n",
		want: []want{{validator.RuleSyntax, 2, "'await' outside function"}}},
	{name: "prose before code", code: "Here is the code:\ncontext['x'] = 1\n",
		want: []want{{validator.RuleSyntax, 1, "`Here is the code:`"}}},
	{name: "null byte", code: "x = 1\x00\n",
		want: []want{{validator.RuleSyntax, 0, "null"}}},
	{name: "deeply nested", code: "x = " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300),
		want: []want{{validator.RuleSyntax, 1, "nested"}}},

	// 2. names
	{name: "typo", keys: []string{"total"}, code: "total = context['total']\ncontext['discount'] = totl * 0.1\n",
		want: []want{{validator.RuleUndefinedName, 2, "name 'totl' is not defined (line 2); did you mean 'total'?"}}},
	{name: "typo of a builtin", code: "context['n'] = lenght([1, 2])\n",
		want: []want{{validator.RuleUndefinedName, 1, "did you mean 'len'?"}}},
	{name: "context key used as a variable", keys: []string{"email_user", "email_password"}, code: "user = email_user\ncontext['u'] = user\n",
		want: []want{{validator.RuleUndefinedName, 1, "it is a context key: read it with context['email_user']"}}},
	{name: "missing import of a stdlib module", code: "context['b'] = base64.b64encode(b'x').decode()\n",
		want: []want{{validator.RuleUndefinedName, 1, "import it first (`import base64`)"}}},
	{name: "missing import of pandas alias", code: "context['df'] = pd.DataFrame().to_dict()\n",
		want: []want{{validator.RuleUndefinedName, 1, "`import pandas as pd`"}}},
	{name: "used before assignment", code: "context['y'] = y\ny = 1\n",
		want: []want{{validator.RuleUndefinedName, 1, "name 'y' is used on line 1 before it is assigned (first assigned on line 2)"}}},
	{name: "accumulator never initialised", keys: []string{"items"}, code: "for item in context['items']:\n    total += item\ncontext['total'] = total\n",
		want: []want{{validator.RuleUndefinedName, 2, "`total += ...` needs a value first"}}},
	{name: "local used before assignment", code: "def f():\n    print(z)\n    z = 1\nf()\n",
		want: []want{{validator.RuleUndefinedName, 2, "local variable 'z' of function 'f' is used on line 2"}}},
	{name: "module counter changed in a function without global", code: "count = 0\ndef bump():\n    count += 1\nbump()\n",
		want: []want{{validator.RuleUndefinedName, 3, "has no value when `count += ...` runs (line 3); the assignment hides the module's 'count': rename the local variable, or declare `global count`"}}},
	{name: "comprehension variable does not leak", code: "squares = [x * x for x in range(3)]\ncontext['last'] = x\n",
		want: []want{{validator.RuleUndefinedName, 2, "name 'x' is not defined"}}},
	{name: "undefined in a function body", code: "def f():\n    return helper(1)\ncontext['v'] = f()\n",
		want: []want{{validator.RuleUndefinedName, 2, "name 'helper' is not defined"}}},
	{name: "one finding per name, all lines", code: "a = totl\nb = totl\nc = totl\n",
		want: []want{{validator.RuleUndefinedName, 1, "(line 1; also used on lines 2, 3)"}}},

	// 3. context keys
	{name: "wrong key", keys: []string{"total", "items"}, code: "context['discount'] = context['totals'] * 0.1\n",
		want: []want{{validator.RuleUnknownContextKey, 1, "context key 'totals' is read on line 1 but the context has no such key (available: total, items); did you mean context['total']?"}}},
	{name: "empty context", code: "x = context['anything']\n",
		want: []want{{validator.RuleUnknownContextKey, 1, "(the context is empty)"}}},
	{name: "read before the code sets it", keys: []string{"a"}, code: "x = context['b']\ncontext['b'] = 1\n",
		want: []want{{validator.RuleUnknownContextKey, 1, "read on line 1 before the code sets it (line 2)"}}},
	{name: "augmented read of a missing key", keys: []string{"a"}, code: "context['count'] += 1\n",
		want: []want{{validator.RuleUnknownContextKey, 1, "context key 'count'"}}},
	{name: "wrong nested key source", keys: []string{"invoice"}, code: "amount = context['invoices']['total']\ncontext['a'] = amount\n",
		want: []want{{validator.RuleUnknownContextKey, 1, "did you mean context['invoice']?"}}},
	{name: "analysis code reads a wrong key too", keys: []string{"pdf_data_b64"}, stage: "ANALYSIS", code: "# STAGE: ANALYSIS\nimport base64\ndata = base64.b64decode(context['pdf_b64'])\n",
		want: []want{{validator.RuleUnknownContextKey, 3, "context key 'pdf_b64'"}}},

	// 4. imports
	{name: "subprocess", code: "import subprocess\nsubprocess.run(['ls'])\n",
		want: []want{{validator.RuleForbiddenImport, 1, "'subprocess' is not allowed in node code (line 1)"}}},
	{name: "from os import system", code: "from os import system\nsystem('ls')\n",
		want: []want{{validator.RuleForbiddenImport, 1, "'os.system' is not allowed"}}},
	{name: "os.system call", code: "import os\nos.system('ls')\n",
		want: []want{{validator.RuleForbiddenImport, 2, "'os.system' is not allowed"}}},
	{name: "os.exec family", code: "import os\nos.execv('/bin/sh', ['sh'])\n",
		want: []want{{validator.RuleForbiddenImport, 2, "'os.execv' is not allowed"}}},
	{name: "socket submodule import", code: "from multiprocessing.pool import Pool\n",
		want: []want{{validator.RuleForbiddenImport, 1, "'multiprocessing.pool' is not allowed"}}},
	{name: "dynamic import", code: "s = __import__('socket')\n",
		want: []want{{validator.RuleForbiddenImport, 1, "'socket' is not allowed"}}},
	{name: "importlib", code: "import importlib\nm = importlib.import_module('ctypes')\n",
		want: []want{{validator.RuleForbiddenImport, 1, "'importlib' is not allowed"}, {validator.RuleForbiddenImport, 2, "'ctypes' is not allowed"}}},
	{name: "not installed", code: "import tensorflow as tf\ncontext['v'] = tf.__version__\n",
		want: []want{{validator.RuleMissingModule, 1, "module 'tensorflow' is not installed in the sandbox runtime (line 1); use the standard library or the installed libraries: fitz (PyMuPDF"}}},
	{name: "installed under another name", code: "import pymupdf\n",
		want: []want{{validator.RuleMissingModule, 1, "PyMuPDF is installed and imported as 'fitz' (`import fitz`)"}}},
	{name: "from a missing package", code: "from sklearn.linear_model import LinearRegression\n",
		want: []want{{validator.RuleMissingModule, 1, "module 'sklearn' is not installed"}}},
	{name: "relative import", code: "from .helpers import x\n",
		want: []want{{validator.RuleMissingModule, 1, "relative import `from .helpers import ...`"}}},

	// 5. decision nodes
	{name: "no branch decision", node: "decision", values: []string{"approve", "reject"}, code: "context['approved'] = True\n",
		want: []want{{validator.RuleNoBranchDecision, 0, "never sets context['branch_decision']; set it to one of: 'approve', 'reject'"}}},
	{name: "branch decision value not an edge", node: "decision", values: []string{"approve", "reject"}, code: "context['branch_decision'] = 'maybe'\n",
		want: []want{{validator.RuleBadBranchDecision, 1, "is set to 'maybe' (line 1), which is not an allowed value; allowed: 'approve', 'reject'"}}},
	{name: "branch decision case", node: "decision", values: []string{"approve", "reject"}, code: "context['branch_decision'] = 'Approve' if context.get('ok') else 'reject'\n",
		want: []want{{validator.RuleBadBranchDecision, 1, "values are case-sensitive: use 'approve'"}}},
	{name: "branch decision through a variable", node: "decision", values: []string{"true", "false"}, code: "d = 'yes'\nif context.get('x'):\n    d = 'true'\ncontext['branch_decision'] = d\n",
		want: []want{{validator.RuleBadBranchDecision, 1, "'yes'"}}},

	// several rules at once
	{name: "several problems", keys: []string{"total"}, node: "decision", values: []string{"a", "b"}, code: "import socket\nx = context['totl']\ny = undefined_thing\n",
		want: []want{
			{validator.RuleNoBranchDecision, 0, "branch_decision"},
			{validator.RuleForbiddenImport, 1, "'socket'"},
			{validator.RuleUnknownContextKey, 2, "'totl'"},
			{validator.RuleUndefinedName, 3, "'undefined_thing'"},
		}},
}

func TestBrokenProgramsAreFound(t *testing.T) {
	for _, tc := range brokenPrograms {
		t.Run(tc.name, func(t *testing.T) {
			verify(t, tc, run(t, tc))
		})
	}
}

// The AI pipeline's retry test (task "Calculate
// discount (10% if total > 1000)" with {"total": 1500}) feeds broken
// answers before a good one; these are those answers and their likely
// variants. caught says whether the validator stops each before it runs.
var retryPrograms = []struct {
	checkCase
	caught bool
}{
	{checkCase{name: "attempt 1: NameError on a typo", keys: []string{"total"}, code: `# STAGE: TASK
total = context['total']
discount = totl * 0.1 if total > 1000 else 0
context['discount'] = discount
context['final_total'] = total - discount
`, want: []want{{validator.RuleUndefinedName, 3, "name 'totl' is not defined (line 3); did you mean 'total'?"}}}, true},
	{checkCase{name: "attempt 2: wrong key", keys: []string{"total"}, code: `# STAGE: TASK
total = context['totals']
discount = total * 0.1 if total > 1000 else 0
context['discount'] = discount
context['final_total'] = total - discount
`, want: []want{{validator.RuleUnknownContextKey, 2, "context key 'totals' is read on line 2 but the context has no such key (available: total); did you mean context['total']?"}}}, true},
	{checkCase{name: "attempt 2 variant: wrong key read with get (a None result, left to output validation)", keys: []string{"total"}, code: `# STAGE: TASK
total = context.get('totals') or 0
discount = total * 0.1 if total > 1000 else 0
context['discount'] = discount
context['final_total'] = total - discount
`}, false},
	{checkCase{name: "variant: undefined variable", keys: []string{"total"}, code: `# STAGE: TASK
context['discount'] = total * 0.1 if total > 1000 else 0
`, want: []want{{validator.RuleUndefinedName, 2, "it is a context key: read it with context['total']"}}}, true},
	{checkCase{name: "variant: typo in a function name", keys: []string{"total"}, code: `# STAGE: TASK
total = context['total']
context['discount'] = rnd(total * 0.1, 2)
`, want: []want{{validator.RuleUndefinedName, 3, "name 'rnd' is not defined"}}}, true},
	{checkCase{name: "variant: missing import", keys: []string{"total"}, code: `# STAGE: TASK
amount = Decimal(str(context['total']))
context['discount'] = float(amount * Decimal('0.1'))
`, want: []want{{validator.RuleUndefinedName, 2, "name 'Decimal' is not defined"}}}, true},
	{checkCase{name: "variant: forbidden import", keys: []string{"total"}, code: `# STAGE: TASK
import subprocess
out = subprocess.check_output(['python3', '-c', 'print(1500 * 0.1)'])
context['discount'] = float(out)
`, want: []want{{validator.RuleForbiddenImport, 2, "'subprocess' is not allowed"}}}, true},
	{checkCase{name: "variant: library not installed", keys: []string{"total"}, code: `# STAGE: TASK
import numpy_financial as npf
context['discount'] = context['total'] * 0.1
`, want: []want{{validator.RuleMissingModule, 2, "module 'numpy_financial' is not installed"}}}, true},
	{checkCase{name: "variant: syntax error", keys: []string{"total"}, code: `# STAGE: TASK
total = context['total']
if total > 1000
    context['discount'] = total * 0.1
`, want: []want{{validator.RuleSyntax, 3, "expected ':'"}}}, true},
	{checkCase{name: "variant: decision without branch_decision", keys: []string{"total"}, node: "decision", values: []string{"true", "false"}, code: `# STAGE: TASK
context['is_big'] = context['total'] > 1000
`, want: []want{{validator.RuleNoBranchDecision, 0, "set it to one of: 'true', 'false'"}}}, true},
	{checkCase{name: "variant: decision value not an edge", keys: []string{"total"}, node: "decision", values: []string{"true", "false"}, code: `# STAGE: TASK
context['branch_decision'] = 'big' if context['total'] > 1000 else 'small'
`, want: []want{{validator.RuleBadBranchDecision, 2, "'big'"}, {validator.RuleBadBranchDecision, 2, "'small'"}}}, true},
	{checkCase{name: "attempt 3: correct", keys: []string{"total"}, code: `# STAGE: TASK
total = context['total']
discount = total * 0.1 if total > 1000 else 0
context['discount'] = discount
context['final_total'] = total - discount
`}, false},
}

func TestRetryTestProgramsAreCaughtBeforeExecution(t *testing.T) {
	caught, broken := 0, 0
	for _, tc := range retryPrograms {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.checkCase)
			verify(t, tc.checkCase, got)
			if tc.caught != (len(got) > 0) {
				t.Errorf("caught = %v, want %v", len(got) > 0, tc.caught)
			}
		})
		if !strings.HasPrefix(tc.name, "attempt 3") {
			broken++
			if tc.caught {
				caught++
			}
		}
	}
	t.Logf("the validator stops %d of %d broken programs before execution (both broken answers of the retry test)", caught, broken)
}

func TestStageOf(t *testing.T) {
	for code, want := range map[string]string{
		"# STAGE: ANALYSIS\nx = 1": validator.StageAnalysis,
		"x = 1\n  #STAGE: TASK":    validator.StageTask,
		"x = 1":                    validator.StageTask,
		"s = '# STAGE: ANALYSIS'":  validator.StageTask,
	} {
		if got := validator.StageOf(code); got != want {
			t.Errorf("StageOf(%q) = %s, want %s", code, got, want)
		}
	}
}

func TestPolicyAndRuntime(t *testing.T) {
	ctx := context.Background()
	code := "import tensorflow\nimport socket\n"
	// Without a runtime description the installed-module check is skipped.
	got, err := validator.Check(ctx, validator.Input{Code: code})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rule != validator.RuleForbiddenImport {
		t.Errorf("without runtime: %+v", got)
	}
	// A configured list replaces the default.
	got, err = validator.Check(ctx, validator.Input{Code: code, Forbidden: []string{"tensorflow"}, Runtime: sandboxRuntime(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rule != validator.RuleForbiddenImport || !strings.Contains(got[0].Message, "'tensorflow'") {
		t.Errorf("custom forbidden list: %+v", got)
	}
	// A configured prelude defines names.
	got, err = validator.Check(ctx, validator.Input{Code: "context['x'] = helper(1)", Prelude: []string{"context", "helper"}})
	if err != nil || len(got) != 0 {
		t.Errorf("custom prelude: %+v, %v", got, err)
	}
	// Oversized code is refused without running the checker.
	got, err = validator.Check(ctx, validator.Input{Code: strings.Repeat("x = 1\n", validator.MaxCodeBytes/6+1)})
	if err != nil || len(got) != 1 || got[0].Rule != validator.RuleTooLarge {
		t.Errorf("oversized: %+v, %v", got, err)
	}
	// A checker that cannot run is an error, not a verdict.
	_, err = validator.Check(ctx, validator.Input{Code: "x = 1", Python: "/nonexistent/python3"})
	if !errors.Is(err, validator.ErrChecker) {
		t.Errorf("missing interpreter: %v", err)
	}
}

func TestUnicodeCode(t *testing.T) {
	tc := checkCase{name: "unicode", keys: []string{"café"}, code: "# Größe\nprix = context['café']\ncontext['résumé'] = f'{prix} €'\nx = context['cafe']\n",
		want: []want{{validator.RuleUnknownContextKey, 4, "did you mean context['café']?"}}}
	verify(t, tc, run(t, tc))
}

func TestOtherLanguagesAreNotChecked(t *testing.T) {
	got, err := validator.Check(context.Background(), validator.Input{Code: "module.exports = async () => ({x: 1})", Language: "javascript"})
	if err != nil || len(got) != 0 {
		t.Errorf("javascript: %+v, %v", got, err)
	}
	got, err = validator.Check(context.Background(), validator.Input{Code: "const x = 1;", Language: "Python"})
	if err != nil || len(got) != 1 || got[0].Rule != validator.RuleSyntax {
		t.Errorf("python spelled with a capital: %+v, %v", got, err)
	}
}

// A program checked again against the same input is answered from the memo
// (the interpreter is not started again), with the same findings, those
// added after the checker included; another input runs the checker. An
// interpreter that fails is not remembered.
func TestMemo(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s: %v", python, err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	runs := dir + "/runs"
	counting := dir + "/python3"
	script := fmt.Sprintf("#!/bin/sh\necho run >> %s\nexec %s \"$@\"\n", runs, python)
	if err := os.WriteFile(counting, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	started := func() int {
		b, err := os.ReadFile(runs)
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "run\n")
	}
	memo := validator.NewMemo(2)
	// socket is found by the checker's imports, then judged in Go: the
	// finding is added after the answer, which must stay as it was.
	in := validator.Input{Code: "import socket\nx = context['a']\ny = context['b']\n", ContextKeys: []string{"a"}, Python: counting, Memo: memo}
	first, err := validator.Check(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 {
		t.Fatalf("findings %+v, want a forbidden import and an unknown context key", first)
	}
	for i := range 3 {
		again, err := validator.Check(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Errorf("check %d from the memo: %+v, want %+v", i+2, again, first)
		}
	}
	if n := started(); n != 1 {
		t.Errorf("the interpreter started %d times for one input, want 1", n)
	}
	other := in
	other.ContextKeys = []string{"a", "b"}
	if got, err := validator.Check(ctx, other); err != nil || len(got) != 1 {
		t.Errorf("other context keys: %+v, %v; want the forbidden import only", got, err)
	}
	if n := started(); n != 2 {
		t.Errorf("the interpreter started %d times for two inputs, want 2", n)
	}
	// Bounded: a third input pushes the least recently used out.
	third := in
	third.Code += "z = 1\n"
	if _, err := validator.Check(ctx, third); err != nil {
		t.Fatal(err)
	}
	if memo.Len() != 2 {
		t.Errorf("memo holds %d answers, want at most 2", memo.Len())
	}
	failing := in
	failing.Python = dir + "/missing-python3"
	for range 2 {
		if _, err := validator.Check(ctx, failing); !errors.Is(err, validator.ErrChecker) {
			t.Errorf("missing interpreter with a memo: %v", err)
		}
	}
	if memo.Len() != 2 {
		t.Errorf("memo holds %d answers after failures, want 2", memo.Len())
	}
}
