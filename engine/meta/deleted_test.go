package meta

import "testing"

// State.Deleted: a live incarnation is not deleted, an earlier one is; a deleted stream's incarnation
// is until the name is created again, when only the earlier incarnations are; an id never seen is not.
func TestState_Deleted(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("orders", 1, 2, 3)
	other := f.createStream("other", 2, 1, 3)
	if f.s.Deleted(st.ID, st.Incarnation) || f.s.Deleted(other.ID, other.Incarnation) || f.s.Deleted(99, 1) {
		t.Fatal("a live stream or an unknown id reported deleted")
	}
	f.mustApply(DeleteStream{Stream: st.ID, Incarnation: st.Incarnation})
	if !f.s.Deleted(st.ID, st.Incarnation) {
		t.Fatal("the deleted incarnation is not reported deleted")
	}
	if f.s.Deleted(other.ID, other.Incarnation) {
		t.Fatal("another stream reported deleted")
	}
	again := f.createStream("orders", 2, 1, 3)
	if again.ID != st.ID || again.Incarnation != st.Incarnation+1 {
		t.Fatalf("created again as %d/%d", again.ID, again.Incarnation)
	}
	if !f.s.Deleted(st.ID, st.Incarnation) || f.s.Deleted(again.ID, again.Incarnation) {
		t.Fatal("after the name came back: the old incarnation must be deleted, the new one live")
	}
}
