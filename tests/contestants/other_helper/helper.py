ORIGIN = "other_helper"
