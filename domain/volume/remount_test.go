package volume

import "testing"

func TestNeedsRemount(t *testing.T) {
	cases := []struct {
		name       string
		term       Term
		want       RemountReason
		record     string
		mayRecord  bool
		needed     bool
		wantString string
	}{
		{"remounted in this term: skipped", Term{Active: true, Epoch: 7, Remounted: "7"}, RemountDone, "7", true, false,
			"already remounted in epoch 7, this term: nothing was received since"},
		{"never remounted (a takeover's copy, a daemon restart before the first remount)", Term{Active: true, Epoch: 7}, RemountNeverRecorded, "7", true, true,
			"no remount is recorded for the copy (the term is epoch 7)"},
		{"remounted in an earlier term: received into since", Term{Active: true, Epoch: 7, Remounted: "6"}, RemountOtherTerm, "7", true, true,
			"last remounted in epoch 6, and the term is epoch 7: the copy may have been received into since"},
		{"a record from a later term than the state read is not this term's", Term{Active: true, Epoch: 7, Remounted: "8"}, RemountOtherTerm, "7", true, true, ""},
		{"not the active primary in the state read: no term vouches", Term{Epoch: 7, Remounted: "7"}, RemountUnknownTerm, "", false, true,
			"the replica state does not show this node's replica as the active primary"},
		{"a leading zero is not what the rule writes", Term{Active: true, Epoch: 7, Remounted: "07"}, RemountUnreadableRecord, "7", true, true, ""},
		{"a sign", Term{Active: true, Epoch: 7, Remounted: "+7"}, RemountUnreadableRecord, "7", true, true, ""},
		{"spaces", Term{Active: true, Epoch: 7, Remounted: " 7"}, RemountUnreadableRecord, "7", true, true, ""},
		{"epoch 0 is no term's", Term{Active: true, Epoch: 0, Remounted: "0"}, RemountUnreadableRecord, "", false, true, ""},
		{"overflow", Term{Active: true, Epoch: 7, Remounted: "18446744073709551616"}, RemountUnreadableRecord, "7", true, true, ""},
		{"garbage", Term{Active: true, Epoch: 7, Remounted: "yes"}, RemountUnreadableRecord, "7", true, true,
			`the remount record "yes" is not an epoch (the term is epoch 7)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := NeedsRemount(c.term)
			if v.Reason != c.want || v.Needed() != c.needed {
				t.Fatalf("NeedsRemount(%+v) = %+v (needed %v), want %v (needed %v)", c.term, v, v.Needed(), c.want, c.needed)
			}
			rec, ok := v.Record()
			if rec != c.record || ok != c.mayRecord {
				t.Fatalf("Record() = %q, %v, want %q, %v", rec, ok, c.record, c.mayRecord)
			}
			if c.wantString != "" && v.String() != c.wantString {
				t.Fatalf("String() = %q, want %q", v.String(), c.wantString)
			}
		})
	}
}

// What FormatRemounted writes, ParseRemounted reads back, for any epoch a
// term can have.
func TestRemountRecordRoundTrips(t *testing.T) {
	for _, e := range []uint64{1, 2, 9, 10, 1 << 32, ^uint64(0)} {
		got, ok := ParseRemounted(FormatRemounted(e))
		if !ok || got != e {
			t.Fatalf("ParseRemounted(FormatRemounted(%d)) = %d, %v", e, got, ok)
		}
		if v := NeedsRemount(Term{Active: true, Epoch: e, Remounted: FormatRemounted(e)}); v.Needed() {
			t.Fatalf("epoch %d recorded for itself: %v", e, v)
		}
	}
}

// A hostile record cannot flood a message.
func TestAnUnreadableRecordIsTruncatedInTheVerdict(t *testing.T) {
	long := make([]byte, 10000)
	for i := range long {
		long[i] = 'x'
	}
	if s := NeedsRemount(Term{Active: true, Epoch: 1, Remounted: string(long)}).String(); len(s) > 200 {
		t.Fatalf("verdict of %d bytes", len(s))
	}
}
