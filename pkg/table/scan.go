package table

import (
	"bytes"
	"errors"
	"fmt"
)

// errSyntax: the bytes are not a row (or object) as the apiserver writes
// them: compact JSON in the Table's field order.
var errSyntax = errors.New("table row is not compact JSON in the apiserver's layout")

// skipValue returns the index just past the JSON value that starts at
// b[i]. It checks nesting and strings, not the grammar of literals.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errSyntax
	}
	start := i
	for i < len(b) && b[i] != ',' && b[i] != ']' && b[i] != '}' {
		i++
	}
	if i == start {
		return 0, errSyntax
	}
	return i, nil
}

// skipString returns the index just past the JSON string that starts at
// b[i].
func skipString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errSyntax
}

// expect returns the index past lit when b[i:] starts with it.
func expect(b []byte, i int, lit string) (int, error) {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return 0, fmt.Errorf("%w: want %q at byte %d", errSyntax, lit, i)
	}
	return i + len(lit), nil
}

// span is a byte range [start, end).
type span struct{ start, end int }

// rowLayout is where the parts of a row lie.
type rowLayout struct {
	cells  []span // each cell's JSON value
	object span   // the object's JSON value
}

// scanRow finds the cells and the object of
// {"cells":[...][,"conditions":[...]],"object":...}.
func scanRow(b []byte) (rowLayout, error) {
	var l rowLayout
	i, err := expect(b, 0, `{"cells":[`)
	if err != nil {
		return l, err
	}
	if i < len(b) && b[i] == ']' {
		i++
	} else {
		for {
			end, err := skipValue(b, i)
			if err != nil {
				return l, err
			}
			l.cells = append(l.cells, span{i, end})
			i = end
			if i < len(b) && b[i] == ',' {
				i++
				continue
			}
			if i, err = expect(b, i, "]"); err != nil {
				return l, err
			}
			break
		}
	}
	if bytes.HasPrefix(b[i:], []byte(`,"conditions":`)) {
		if i, err = skipValue(b, i+len(`,"conditions":`)); err != nil {
			return l, err
		}
	}
	if i, err = expect(b, i, `,"object":`); err != nil {
		return l, err
	}
	end, err := skipValue(b, i)
	if err != nil {
		return l, err
	}
	l.object = span{i, end}
	if end != len(b)-1 || b[end] != '}' {
		return l, fmt.Errorf("%w: the row does not end after its object", errSyntax)
	}
	return l, nil
}

// findField returns the value of top-level field name of the JSON object
// b.
func findField(b []byte, name string) (span, error) {
	i, err := expect(b, 0, "{")
	if err != nil {
		return span{}, err
	}
	for i < len(b) && b[i] != '}' {
		keyEnd, err := skipString(b, i)
		if err != nil {
			return span{}, err
		}
		key := b[i:keyEnd]
		if i, err = expect(b, keyEnd, ":"); err != nil {
			return span{}, err
		}
		end, err := skipValue(b, i)
		if err != nil {
			return span{}, err
		}
		if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
			return span{i, end}, nil
		}
		i = end
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
	return span{}, fmt.Errorf("%w: the object has no %q", errSyntax, name)
}
