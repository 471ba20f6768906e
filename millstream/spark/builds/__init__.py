"""Bulk builds on Spark: adjunct store versions written from a dataset as table files in the blob store."""
