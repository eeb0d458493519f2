package guest

import "testing"

func TestOOMKillsIn(t *testing.T) {
	tests := []struct {
		name, in string
		want     int64
	}{
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n", 2},
		{"v1 memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", 7},
		{"old kernel without the line", "oom_kill_disable 0\nunder_oom 0\n", -1},
		{"garbage", "oom_kill many\n", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := oomKillsIn([]byte(tt.in)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}
