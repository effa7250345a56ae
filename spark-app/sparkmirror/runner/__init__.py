"""`sparkmirror run -f FILE`: every flow group of KafkaMirrorMaker2 resource files, in embedded local Spark."""
