package runtimeinfo

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// libraryAliases maps distribution names and common spellings to import names.
var libraryAliases = map[string]string{
	"pymupdf":        "fitz",
	"mupdf":          "fitz",
	"pillow":         "PIL",
	"beautifulsoup4": "bs4",
	"beautifulsoup":  "bs4",
	"bs":             "bs4",
	"pd":             "pandas",
	"np":             "numpy",
	"pypdf2":         "pypdf",
}

// resolveLibrary turns an alias into an import name; anything else is kept.
func resolveLibrary(name string) string {
	name = strings.TrimSpace(name)
	top, rest, dotted := strings.Cut(name, ".")
	if v, ok := libraryAliases[strings.ToLower(top)]; ok {
		top = v
	}
	if dotted {
		return top + "." + rest
	}
	return top
}

// stopwords carry no meaning in a documentation query.
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "from": true, "in": true, "on": true,
	"for": true, "with": true, "and": true, "or": true, "how": true, "do": true, "i": true, "into": true,
	"by": true, "is": true, "it": true, "as": true, "at": true, "be": true, "this": true, "that": true,
	"using": true, "use": true, "can": true, "what": true, "which": true, "s": true, "my": true,
}

// indexed is a DocEntry prepared for scoring.
type indexed struct {
	entry      *DocEntry
	lib        string // import name, lower case
	name       string // full name, lower case
	last       string // last component, lower case
	lastTok    map[string]bool
	ownerTok   map[string]bool
	sigTok     map[string]bool
	docTok     map[string]bool
	docSeq     []string // doc words in order, for phrase matches
	deprecated bool
}

func buildIndex(libs []Library) []indexed {
	var out []indexed
	for li := range libs {
		lib := &libs[li]
		for ei := range lib.Entries {
			e := &lib.Entries[ei]
			parts := strings.Split(e.Name, ".")
			last := parts[len(parts)-1]
			ix := indexed{
				entry:    e,
				lib:      strings.ToLower(lib.Name),
				name:     strings.ToLower(e.Name),
				last:     strings.ToLower(last),
				lastTok:  set(words(last)),
				ownerTok: map[string]bool{},
				sigTok:   set(words(e.Signature)),
			}
			// Owner: the classes and submodules between the library and the name.
			for _, p := range parts[1 : len(parts)-1] {
				for _, w := range words(p) {
					ix.ownerTok[w] = true
				}
			}
			ix.docSeq = words(e.Doc)
			ix.docTok = set(ix.docSeq)
			ix.deprecated = e.Deprecated
			out = append(out, ix)
		}
	}
	return out
}

// words splits text into lower-case, singular-ish words without stopwords:
// "get_text" -> get, text; "extractText" -> extract, text; "pages" -> page.
func words(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) == 0 {
			return
		}
		w := stem(strings.ToLower(string(cur)))
		cur = cur[:0]
		if w != "" && !stopwords[w] {
			out = append(out, w)
		}
	}
	rs := []rune(s)
	for k, r := range rs {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			// camelCase and PDFText boundaries start a new word.
			if len(cur) > 0 && unicode.IsUpper(r) {
				prev := rs[k-1]
				nextLower := k+1 < len(rs) && unicode.IsLower(rs[k+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					flush()
				}
			}
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// stem strips common English endings so that "pages", "page's" and "page",
// or "parsed" and "parse", meet. It is applied to queries and documentation
// alike, so it only has to be consistent, not correct.
func stem(w string) string {
	for _, suf := range []struct {
		s    string
		keep int
	}{{"ing", 4}, {"ed", 4}, {"es", 3}, {"s", 3}, {"e", 3}} {
		if strings.HasSuffix(w, suf.s) && len(w)-len(suf.s) >= suf.keep && !strings.HasSuffix(w, "ss") {
			return w[:len(w)-len(suf.s)]
		}
	}
	return w
}

func set(ws []string) map[string]bool {
	m := make(map[string]bool, len(ws))
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// Search finds the documentation entries of library (an import name such as
// "fitz", an alias such as "pymupdf", a submodule such as "PIL.Image", or
// empty for every library) that best match query, best first. The query's
// words are matched against names, docstrings and signatures; a query that is
// a name ("read_csv", "read csv", "DataFrame.to_csv") ranks that entry first.
func (i *Info) Search(library, query string, limit int) []DocEntry {
	i.build()
	if limit <= 0 {
		limit = 5
	}
	lib, prefix := "", ""
	if strings.TrimSpace(library) != "" {
		want := resolveLibrary(library)
		top, _, dotted := strings.Cut(want, ".")
		l := i.Library(top)
		if l == nil {
			return nil
		}
		lib = strings.ToLower(l.Name)
		if dotted {
			prefix = strings.ToLower(l.Name + want[len(top):] + ".")
		}
	} else {
		// "pymupdf extract text" without a library: the library is in the
		// query. Standard modules are not taken as one ("read csv" means pandas).
		fields := strings.Fields(query)
		for k, f := range fields {
			if l := i.Library(strings.Trim(f, ".,:;()'\"")); l != nil && l.Distribution != "python" {
				lib = strings.ToLower(l.Name)
				query = strings.Join(append(fields[:k:k], fields[k+1:]...), " ")
				break
			}
		}
	}
	qwords := words(query)
	exact := exactForms(query)
	type hit struct {
		ix    *indexed
		score int
	}
	var hits []hit
	for k := range i.index {
		ix := &i.index[k]
		if lib != "" && ix.lib != lib {
			continue
		}
		if prefix != "" && !strings.HasPrefix(ix.name, prefix) {
			continue
		}
		if s := score(ix, qwords, exact); s > 0 {
			hits = append(hits, hit{ix, s})
		}
	}
	sort.Slice(hits, func(a, b int) bool {
		if hits[a].score != hits[b].score {
			return hits[a].score > hits[b].score
		}
		if len(hits[a].ix.name) != len(hits[b].ix.name) {
			return len(hits[a].ix.name) < len(hits[b].ix.name)
		}
		return hits[a].ix.name < hits[b].ix.name
	})
	var out []DocEntry
	for _, h := range hits[:min(limit, len(hits))] {
		out = append(out, *h.ix.entry)
	}
	return out
}

// exactForms are the spellings of a query that names an entry: "read csv"
// and "read_csv" name read_csv, "DataFrame.to_csv" names that method.
func exactForms(query string) []string {
	q := strings.ToLower(strings.TrimSpace(query))
	q = strings.TrimSuffix(q, "()")
	if q == "" {
		return nil
	}
	fields := strings.Fields(q)
	return []string{q, strings.Join(fields, "_"), strings.Join(fields, "")}
}

func score(ix *indexed, qwords []string, exact []string) int {
	s := 0
	for _, q := range exact {
		if ix.last == q || ix.name == q || strings.HasSuffix(ix.name, "."+q) {
			s += 100
			break
		}
	}
	matched, nameMatched := 0, 0
	for _, w := range qwords {
		ws := 0
		switch {
		case ix.lastTok[w]:
			ws += 6
			nameMatched++
		case len(w) >= 4 && strings.Contains(ix.last, w):
			ws += 4
		case ix.ownerTok[w]:
			ws += 3
		}
		if ix.docTok[w] {
			ws += 4
		}
		if ws == 0 && ix.sigTok[w] {
			ws++
		}
		if ws > 0 {
			matched++
		}
		s += ws
	}
	if s == 0 {
		return 0
	}
	// Entries that match more of the query's words, and docstrings that say
	// it in the query's order ("Extract text ..."), describe what was asked.
	s += matched * matched
	if len(qwords) > 0 && len(ix.docSeq) > 0 && ix.docSeq[0] == qwords[0] {
		s += 4
	}
	for k := 0; k+1 < len(qwords); k++ {
		for d := 0; d+1 < len(ix.docSeq); d++ {
			if ix.docSeq[d] == qwords[k] && ix.docSeq[d+1] == qwords[k+1] {
				s += 3
				break
			}
		}
	}
	// A name the query explains entirely (find_all for "find all tags") beats
	// one that does more (find_all_next).
	if unexplained := len(ix.lastTok) - nameMatched; unexplained == 0 {
		s += 5
	} else {
		s -= 2 * min(unexplained, 3)
	}
	if ix.deprecated {
		s -= 6
	}
	if ix.entry.Doc == "" {
		s--
	}
	return max(s, 1)
}

// Format renders entries for the model: name, signature, and summary, with
// the library's version, shortening long signatures.
func (i *Info) Format(entries []DocEntry) string {
	if len(entries) == 0 {
		return "No matching documentation in the sandbox runtime. Installed libraries: " +
			strings.Join(i.InstalledLibraries(), ", ") + "."
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, e := range entries {
		top, _, _ := strings.Cut(e.Name, ".")
		if l := i.Library(top); l != nil && !seen[l.Name] {
			seen[l.Name] = true
			dist := l.Distribution
			if dist == "python" {
				dist = "Python standard library"
			}
			fmt.Fprintf(&b, "# %s (%s %s)\n", l.Name, dist, l.Version)
		}
		sig := e.Signature
		if len(sig) > 300 {
			sig = sig[:297] + "...)"
		}
		fmt.Fprintf(&b, "%s%s", e.Name, sig)
		if e.Kind != "" && e.Kind != "function" && e.Kind != "method" {
			fmt.Fprintf(&b, "  [%s]", e.Kind)
		}
		if e.Deprecated {
			b.WriteString("  [deprecated]")
		}
		b.WriteByte('\n')
		if e.Doc != "" {
			fmt.Fprintf(&b, "    %s\n", e.Doc)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
