"""Pure planners: snapshot (+ models) -> Plan / ThrottleDecision; one goal per module."""
