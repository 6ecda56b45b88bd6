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
	// Before is the last line of text before the fence (a marker left
	// out), what introduces the block.
	Before string
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
		text   string // the last line of text outside blocks
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
			cur = &Block{File: file, Line: n, Lang: m[2], Before: text}
			open = m[1]
			if r := notRun.FindStringSubmatch(strings.TrimSpace(prev)); r != nil {
				cur.NotRun = r[1]
			}
		} else if t := strings.TrimSpace(line); t != "" && !notRun.MatchString(t) {
			text = t
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

// Substitute returns the block's text with each placeholder replaced by
// its value in values (a placeholder without one stays).
func (b Block) Substitute(values map[string]string) string {
	return placeholder.ReplaceAllStringFunc(b.Text, func(p string) string {
		if v, ok := values[p]; ok {
			return v
		}
		return p
	})
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

// Programs are the programs a shell block that is run may call: those
// TestDocCommands knows how to run on the e2e cluster without changing its
// installation (helm's install, upgrade and uninstall as a dry run, and
// kubectl's writes outside the test's namespace).
var Programs = []string{"kubectl", "helm"}

// Command is one command of a shell block.
type Command struct {
	// Line is its first line in the block (1-based).
	Line int
	// Text is the command as written, its continuation lines joined,
	// without a trailing comment.
	Text string
	// Args are its words, quotes removed.
	Args []string
}

// Commands splits a shell block into its commands. A block that is run
// holds simple commands only, one a line (a backslash continues it):
// TestDocCommands decides for each whether it runs as written or as a
// dry run, which pipes, lists (;, &&, ||), substitutions, redirections
// and here-documents would hide; such a block is an error here.
func Commands(text string) ([]Command, error) {
	var (
		cmds []Command
		cur  strings.Builder
		from int
	)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, line := range lines {
		if cur.Len() == 0 {
			from = i + 1
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			cur.WriteString(" ")
			if i < len(lines)-1 {
				continue
			}
		} else {
			cur.WriteString(line)
		}
		c, err := command(from, cur.String())
		cur.Reset()
		if err != nil {
			return nil, err
		}
		if len(c.Args) > 0 {
			cmds = append(cmds, c)
		}
	}
	return cmds, nil
}

// command reads one command's words, with single and double quotes (a
// backslash escapes the next character outside single quotes) and a
// trailing comment.
func command(line int, text string) (Command, error) {
	var (
		args  []string
		word  strings.Builder
		in    bool // within a word
		quote rune
		end   = len(text)
	)
	runes := []rune(text)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(runes) && strings.ContainsRune(`"\$`+"`", runes[i+1]):
				i++
				word.WriteRune(runes[i])
			case r == '$' || r == '`':
				return Command{}, fmt.Errorf("line %d: %q: no substitutions in a command that is run", line, text)
			default:
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\' && i+1 < len(runes):
			i++
			word.WriteRune(runes[i])
			in = true
		case r == ' ' || r == '\t':
			if in {
				args = append(args, word.String())
				word.Reset()
				in = false
			}
		case r == '#' && !in:
			end = len(string(runes[:i]))
			i = len(runes)
		case strings.ContainsRune("|&;<>()$`", r):
			return Command{}, fmt.Errorf("line %d: %q: one simple command a line, without %q", line, text, r)
		default:
			word.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return Command{}, fmt.Errorf("line %d: %q: unterminated quote", line, text)
	}
	if in {
		args = append(args, word.String())
	}
	return Command{Line: line, Text: strings.TrimSpace(text[:end]), Args: args}, nil
}
