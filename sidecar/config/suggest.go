package config

import "strings"

// closestName returns the known variable name (a _FILE variant included)
// that an unknown MEILISTREAM_* name most likely meant, for "did you
// mean" hints. Edit distance alone ranks by spelling, so it would offer
// MEILISTREAM_MEILI_URL for MEILISTREAM_MEILI_KEY (two letters apart)
// rather than MEILISTREAM_MEILI_API_KEY, the variable with that meaning.
// So names are compared by their words first (nameScore), with the words
// people use for the same thing (synonyms) and abbreviations taken as the
// same word; spelling only breaks ties.
func closestName(name string) string {
	typo := strings.TrimPrefix(strings.ToUpper(name), EnvPrefix)
	best, bestScore, bestDist := "", 0, 0
	for _, v := range Variables {
		cands := []string{v.Name()}
		if v.File {
			cands = append(cands, v.Name()+"_FILE")
		}
		for _, cand := range cands {
			c := strings.TrimPrefix(cand, EnvPrefix)
			if compact(c) == compact(typo) {
				return cand // only the underscores differ
			}
			score, dist := nameScore(typo, c), editDistance(compact(typo), compact(c))
			if best == "" || score > bestScore || score == bestScore && dist < bestDist {
				best, bestScore, bestDist = cand, score, dist
			}
		}
	}
	return best
}

func compact(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "") }

// synonyms maps the words of a variable name to the word the known names
// use for that meaning.
var synonyms = map[string]string{
	"mongo": "mongodb", "meilisearch": "meili", "meilli": "meili",
	"url": "uri", "host": "uri", "endpoint": "uri", "server": "uri", "dsn": "uri", "connection": "uri",
	"apikey": "key", "token": "key", "secret": "key", "master": "api", "masterkey": "key",
	"db": "database", "dbname": "database",
	"address": "addr", "listen": "addr", "port": "addr", "bind": "addr",
	"transform": "transforms", "script": "transforms", "scripts": "transforms",
	"coll": "collection", "ttl": "lease",
	"batch": "batch", "batchsize": "batch", "chunk": "page",
	"format": "format", "level": "level", "loglevel": "level", "verbosity": "level",
	"grace": "grace", "prefix": "prefix",
}

// noise are words that add nothing to what a name means here.
var noise = map[string]bool{"dir": true, "folder": true, "path": true, "the": true, "meilistream": true}

// words splits a name (without the prefix) into its meaningful words,
// synonyms replaced.
func words(name string) []string {
	var out []string
	for _, w := range strings.Split(strings.ToLower(name), "_") {
		if w == "" || noise[w] {
			continue
		}
		if s, ok := synonyms[w]; ok {
			w = s
		}
		out = append(out, w)
	}
	return out
}

// sameWord says whether a word of a typed name stands for a known name's
// word: equal, misspelt (one edit, two for long words, a swap of two
// letters counting one), or an abbreviation of it (its first three
// letters or more: "coll", "trans").
func sameWord(typed, known string) bool {
	switch {
	case typed == known:
		return true
	case len(typed) >= 3 && strings.HasPrefix(known, typed):
		return true
	case len(typed) >= 6 && len(known) >= 6:
		return editDistance(typed, known) <= 2
	case len(typed) >= 3 && len(known) >= 3:
		return editDistance(typed, known) <= 1
	}
	return false
}

// nameScore rates how well a typed name matches a known one by meaning:
// two points per word they share, one off per word only one of them has.
func nameScore(typed, known string) int {
	tw, kw := words(typed), words(known)
	used := make([]bool, len(kw))
	common := 0
	for _, t := range tw {
		for i, k := range kw {
			if !used[i] && sameWord(t, k) {
				used[i] = true
				common++
				break
			}
		}
	}
	return 2*common - (len(tw) - common) - (len(kw) - common)
}

// editDistance is the optimal string alignment distance between a and b:
// Levenshtein's, with a swap of two neighbouring letters counted as one
// edit ("fiel" is one edit from "file").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
