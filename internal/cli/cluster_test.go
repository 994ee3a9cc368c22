package cli

import "testing"

// --shm-budget takes a byte count with an optional K, M or G, and refuses
// anything else with an error that shows the forms it takes.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"1048576": 1 << 20, "512M": 512 << 20, "8G": 8 << 30, "4K": 4096} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "G", "8g", "1.5G", "-1", "8GB", "17179869184G"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d; want an error", in, got)
		}
	}
}
