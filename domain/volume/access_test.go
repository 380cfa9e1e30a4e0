package volume

import "testing"

func TestSingleWriterRefusal(t *testing.T) {
	for _, c := range []struct {
		mode     AccessMode
		readOnly bool
		others   []string
		refused  bool
	}{
		{SingleNodeSingleWriter, false, []string{"/t2"}, true},
		{SingleNodeSingleWriter, false, nil, false},
		{SingleNodeSingleWriter, true, []string{"/t2"}, false},
		{SingleNodeMultiWriter, false, []string{"/t2"}, false},
		{SingleNodeWriter, false, []string{"/t2"}, false},
	} {
		why, refused := SingleWriterRefusal(c.mode, c.readOnly, c.others)
		if refused != c.refused || refused && why == "" {
			t.Errorf("SingleWriterRefusal(%v, %v, %v) = %q, %v", c.mode, c.readOnly, c.others, why, refused)
		}
	}
}
