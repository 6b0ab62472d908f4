"""Railyard: GPU training clusters described as code and brought up with Pulumi and Ansible."""

__version__ = "0.1.0"
