package rubyvm

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
)

// TestRecordedLayoutRoundTrip: every built-in table reads back from its
// record, through JSON, as it was.
func TestRecordedLayoutRoundTrip(t *testing.T) {
	for _, fam := range layouts.Families() {
		l := layouts.For(fam)
		rl, ok := recordLayout(l)
		if !ok {
			t.Fatal("layout.Layout has a field the record does not keep")
		}
		b, err := json.Marshal(rl)
		if err != nil {
			t.Fatal(err)
		}
		var back recordedLayout
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got, ok := back.layout()
		if !ok || !reflect.DeepEqual(got, l) {
			t.Errorf("%s: the layout read back differs", fam)
		}
	}
}
