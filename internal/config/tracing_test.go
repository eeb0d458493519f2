package config

import (
	"testing"
)

func TestValidateTracing(t *testing.T) {
	tests := []struct {
		name string
		tr   Tracing
		want string // substring of the error; "" valid
	}{
		{"off", Tracing{SampleRatio: 1}, ""},
		{"loopback receiver", Tracing{Endpoint: "http://127.0.0.1:4318", SampleRatio: 0.5}, ""},
		{"https with a path", Tracing{Endpoint: "https://otel.example:4318/base", SampleRatio: 1}, ""},
		{"no scheme", Tracing{Endpoint: "127.0.0.1:4318", SampleRatio: 1}, "tracing.endpoint must be an http:// or https:// URL"},
		{"grpc scheme", Tracing{Endpoint: "grpc://127.0.0.1:4317", SampleRatio: 1}, "tracing.endpoint"},
		{"ratio above 1", Tracing{SampleRatio: 2}, "tracing.sample_ratio must be between 0 and 1"},
		{"negative ratio", Tracing{SampleRatio: -0.1}, "tracing.sample_ratio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Tracing = tt.tr
			checkValidate(t, c, tt.want)
		})
	}
}
