"""Railyard's Pulumi ComponentResources: one per thing modelled, each with its Args beside it.

Components wire the plan (railyard.model) to resources; they do no arithmetic of their own and
hand every real object to the driver chosen by `railyard:driver` (railyard/drivers/base.py).
"""
