// Package monitoring tests the dashboards and alert rules in deployments/monitoring.
package monitoring
