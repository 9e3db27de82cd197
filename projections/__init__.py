"""projections"""
