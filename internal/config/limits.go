package config

// Bounds of the per-sandbox network limits, in requests and in [network].
const (
	MaxConnectionsLimit = 1 << 20
	BandwidthMbitLimit  = 100_000
)

// validateNetworkLimits checks [network] max_connections and
// bandwidth_mbit.
func (c Config) validateNetworkLimits(v *validator) {
	if n := c.Network.MaxConnections; n < 0 || n > MaxConnectionsLimit {
		v.addf("network.max_connections must be between 0 (no limit) and %d, got %d", MaxConnectionsLimit, n)
	}
	if n := c.Network.BandwidthMbit; n < 0 || n > BandwidthMbitLimit {
		v.addf("network.bandwidth_mbit must be between 0 (no limit) and %d, got %d", BandwidthMbitLimit, n)
	}
}
