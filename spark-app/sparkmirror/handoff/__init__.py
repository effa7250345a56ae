"""Worker-generation handoff (DESIGN.md section 5): standby, taking a flow group over, the operator's Lease."""
