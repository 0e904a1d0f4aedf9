package redact

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
)

// ruleDef describes a rule that recognises a secret by its look.
type ruleDef struct {
	id string
	// keywords, lowercase, are where a secret starts: the rule's regexp is
	// tried only where one of them occurs in the text, in any case.
	keywords []string
	// offset is how far before its keyword a secret starts, for a rule
	// whose keyword is not its first characters.
	offset int
	// re's first group, when it has one, is the secret; else the match is.
	re string
	// entropy is the least Shannon entropy (bits per character) of the
	// secret; random tokens have more than words and placeholders.
	entropy float64
	// valid, when set, must accept the secret.
	valid func(secret string) bool
}

type rule struct {
	ruleDef
	// anchored is re matched only at the start of the text it is given.
	anchored *regexp.Regexp
}

// ruleSet finds secrets by their look. It never runs a regexp over a whole
// text, which on a large value (a base64 file) would cost milliseconds:
// one pass finds the keywords, and each rule is tried, anchored, only
// where one of its keywords starts. The pass looks every pair of bytes,
// lowercased, up in a table of the pairs that begin a keyword, and
// compares whole keywords only at the few places where one does.
type ruleSet struct {
	rules []rule
	// byPair[pairOf(a, b)] is 1 + the index in keywords of the keywords
	// that begin with a, b; 0 for none.
	byPair   [1 << 16]uint8
	keywords [][]keyword
}

type keyword struct {
	word  string
	rules []int // indexes in ruleSet.rules
}

// secretRules are every rule NOVA applies.
var secretRules = newRuleSet(slices.Concat(gitleaksRules, novaRules))

func newRuleSet(defs []ruleDef) *ruleSet {
	s := &ruleSet{}
	byWord := map[string][]int{}
	for i, d := range defs {
		s.rules = append(s.rules, rule{ruleDef: d, anchored: regexp.MustCompile(`^(?:` + d.re + `)`)})
		if len(d.keywords) == 0 {
			panic("redact: rule " + d.id + " has no keyword")
		}
		for _, w := range d.keywords {
			if len(w) < 2 || w != strings.ToLower(w) {
				panic("redact: rule " + d.id + ": keyword " + w + " is not lowercase or is shorter than 2 bytes")
			}
			byWord[w] = append(byWord[w], i)
		}
	}
	for _, w := range slices.Sorted(maps.Keys(byWord)) {
		p := pairOf(w[0], w[1])
		if s.byPair[p] == 0 {
			if len(s.keywords) == math.MaxUint8 {
				panic("redact: keywords begin with too many different pairs of bytes")
			}
			s.keywords = append(s.keywords, nil)
			s.byPair[p] = uint8(len(s.keywords))
		}
		g := s.byPair[p] - 1
		s.keywords[g] = append(s.keywords[g], keyword{word: w, rules: byWord[w]})
	}
	return s
}

// pairOf is the index of two bytes, lowercased, in ruleSet.byPair.
func pairOf(a, b byte) uint16 { return uint16(lower[a])<<8 | uint16(lower[b]) }

// lower maps ASCII upper case to lower case and every other byte to itself.
var lower = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
		if 'A' <= i && i <= 'Z' {
			t[i] += 'a' - 'A'
		}
	}
	return t
}()

// hasKeyword reports whether text starts with the lowercase keyword w in
// any ASCII case.
func hasKeyword(text, w string) bool {
	if len(text) < len(w) {
		return false
	}
	for i := 0; i < len(w); i++ {
		if lower[text[i]] != w[i] {
			return false
		}
	}
	return true
}

// span is where a secret sits in a text, and the rule that found it.
type span struct {
	start, end int
	rule       string
}

// find calls found for each secret in text, in the order their keywords
// occur, until found returns false.
func (s *ruleSet) find(text string, found func(span) bool) {
	if len(text) < 2 {
		return
	}
	pair := uint16(lower[text[0]])
	for i := 0; i+1 < len(text); i++ {
		pair = pair<<8 | uint16(lower[text[i+1]]) // pairOf(text[i], text[i+1])
		g := s.byPair[pair]
		if g == 0 {
			continue
		}
		for _, k := range s.keywords[g-1] {
			if !hasKeyword(text[i:], k.word) {
				continue
			}
			for _, r := range k.rules {
				if sp, ok := s.rules[r].matchAt(text, i-s.rules[r].offset); ok && !found(sp) {
					return
				}
			}
		}
	}
}

// matchAt finds the rule's secret starting at text[at].
func (r *rule) matchAt(text string, at int) (span, bool) {
	// A secret that starts with a word character starts a word; \b in the
	// rule cannot tell, as it does not see text before at.
	if at < 0 || at > 0 && isWordByte(text[at-1]) && isWordByte(text[at]) {
		return span{}, false
	}
	m := r.anchored.FindStringSubmatchIndex(text[at:])
	if m == nil {
		return span{}, false
	}
	start, end := m[0], m[1]
	if len(m) >= 4 && m[2] >= 0 {
		start, end = m[2], m[3]
	}
	secret := text[at+start : at+end]
	if r.entropy > 0 && entropy(secret) < r.entropy || r.valid != nil && !r.valid(secret) {
		return span{}, false
	}
	return span{at + start, at + end, r.id}, true
}

func isWordByte(c byte) bool {
	c = lower[c]
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_'
}

// spans are the secrets in text, in order, overlapping ones merged.
func (s *ruleSet) spans(text string) []span {
	var out []span
	s.find(text, func(sp span) bool {
		out = append(out, sp)
		return true
	})
	if len(out) < 2 {
		return out
	}
	slices.SortFunc(out, func(a, b span) int { return a.start - b.start })
	merged := out[:1]
	for _, sp := range out[1:] {
		last := &merged[len(merged)-1]
		if sp.start <= last.end {
			last.end = max(last.end, sp.end)
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// entropy is the Shannon entropy of s in bits per byte, as gitleaks
// computes it.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var h float64
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// lettersAndDigits reports whether s has both an ASCII letter and a digit.
func lettersAndDigits(s string) bool {
	var letter, digit bool
	for i := 0; i < len(s); i++ {
		c := lower[s[i]]
		letter = letter || 'a' <= c && c <= 'z'
		digit = digit || '0' <= c && c <= '9'
	}
	return letter && digit
}
