package config

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// WriteDefaults writes every option at its default as a TOML file, each option under a comment that
// says what it does. Parse reads the output back to Defaults.
func WriteDefaults(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("# ringstream node configuration: every option at its default.\n" +
		"# Durations are milliseconds or duration strings (\"500ms\", \"2s\"); each must be a whole multiple of tick_ms.\n")
	comments := optionComments()
	d := reflect.ValueOf(Defaults())
	for i := range d.NumField() {
		section := d.Type().Field(i).Tag.Get("toml")
		fmt.Fprintf(&b, "\n[%s]\n", section)
		sv := d.Field(i)
		for j := range sv.NumField() {
			key := sv.Type().Field(j).Tag.Get("toml")
			comment, ok := comments[section+"."+key]
			if !ok {
				return fmt.Errorf("config: option %s.%s has no comment", section, key)
			}
			writeComment(&b, comment)
			line, err := optionLine(key, sv.Field(j).Interface())
			if err != nil {
				return fmt.Errorf("config: option %s.%s: %w", section, key, err)
			}
			b.WriteString(line)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeComment writes text as # lines of at most about 100 columns.
func writeComment(b *bytes.Buffer, text string) {
	line := "#"
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > 100 && line != "#" {
			b.WriteString(line + "\n")
			line = "#"
		}
		line += " " + word
	}
	b.WriteString(line + "\n")
}

// optionLine encodes key = value. A map is written as an inline table with its keys in order, so that
// it stays inside its section.
func optionLine(key string, value any) (string, error) {
	if m, ok := value.(map[string]string); ok {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		})
		slices.SortStableFunc(keys, func(a, b string) int { return len(a) - len(b) }) // 2 before 10
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + " = " + strconv.Quote(m[k])
		}
		return key + " = { " + strings.Join(parts, ", ") + " }\n", nil
	}
	out, err := toml.Marshal(map[string]any{key: value})
	if err != nil {
		return "", err
	}
	return string(out), nil
}
