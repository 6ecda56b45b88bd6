// Package mdblock reads the fenced code blocks of the project's Markdown
// documents: the commands and manifests a user copies. Each block is
// either output (```text), run by the e2e test TestDocCommands (```sh,
// ```yaml), or marked on the line before its fence with the reason it is
// not run there: <!-- not run: needs a cloud registry -->. The unit test
// in test/docs fails on a block that is neither.
package mdblock

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The languages a block may have.
const (
	// Shell commands, run with bash -euo pipefail.
	Shell = "sh"
	// Kubernetes manifests, applied with a server-side dry run.
	YAML = "yaml"
	// Output, or anything else not to run.
	Text = "text"
)

// Langs are the languages a fence may name.
var Langs = []string{Shell, YAML, Text}

// Block is one fenced code block.
type Block struct {
	// File is the document's path relative to the repository's root.
	File string
	// Line is the opening fence's line (1-based).
	Line int
	// Lang is the fence's info string ("" when it names none).
	Lang string
	// Text is the block's content, each line ending in a newline.
	Text string
	// NotRun is the reason given on the line before the fence, "" when
	// the block is not marked.
	NotRun string
}

// String names a block as a reader finds it: file:line.
func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Run reports whether TestDocCommands runs the block.
func (b Block) Run() bool { return b.NotRun == "" && (b.Lang == Shell || b.Lang == YAML) }

// Documents are the documents whose blocks are checked, relative to the
// repository's root: README.md, docs/*.md and the chart's README
// (generated from its README.md.gotmpl, where its markers go).
func Documents(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md", filepath.Join("deployments", "helm", "dra-driver-swap", "README.md")}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, rel)
	}
	slices.Sort(files)
	return files, nil
}

// Load parses every document's blocks.
func Load(root string) ([]Block, error) {
	files, err := Documents(root)
	if err != nil {
		return nil, err
	}
	var all []Block
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		blocks, err := Parse(f, string(data))
		if err != nil {
			return nil, err
		}
		all = append(all, blocks...)
	}
	return all, nil
}

var (
	fence  = regexp.MustCompile("^(```+)\\s*(\\S*)")
	notRun = regexp.MustCompile(`^<!-- not run: (.+?) -->$`)
)

// Parse returns a document's fenced blocks (fences at the start of a
// line; a block's indented fences are not looked for: no document indents
// one). An unclosed block is an error.
func Parse(file, content string) ([]Block, error) {
	var (
		blocks []Block
		cur    *Block
		open   string
		prev   string
		body   strings.Builder
	)
	s := bufio.NewScanner(strings.NewReader(content))
	s.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if cur != nil {
			if strings.TrimSpace(line) == open {
				cur.Text = body.String()
				blocks = append(blocks, *cur)
				cur, open = nil, ""
				body.Reset()
			} else {
				body.WriteString(line + "\n")
			}
			prev = line
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			cur = &Block{File: file, Line: n, Lang: m[2]}
			open = m[1]
			if r := notRun.FindStringSubmatch(strings.TrimSpace(prev)); r != nil {
				cur.NotRun = r[1]
			}
		}
		prev = line
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the block is not closed", file, cur.Line)
	}
	return blocks, nil
}

// placeholder is a value a document leaves to the reader: <registry>.
var placeholder = regexp.MustCompile(`<[a-z][a-z0-9.-]*>`)

// Substitutions are the placeholders a block that is run may hold, each
// with what TestDocCommands puts in its place.
var Substitutions = map[string]string{
	"<registry>": "the e2e cluster's registry",
	"<x.y.z>":    "the chart's version",
}

// Placeholders returns the placeholders in a block, in order, once each.
func (b Block) Placeholders() []string {
	var out []string
	for _, p := range placeholder.FindAllString(b.Text, -1) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
