"""Drivers realise the components' resources on a substrate: `lab` (this machine) today, clouds later.

A driver never imports another driver.
"""
