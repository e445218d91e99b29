# What jq 1.6 defines and jaq does not, written in jq over jaq's own
# definitions: the filters a model that knows jq reaches for (tables as CSV
# or TSV, membership, indexing, leaf paths, streams). Each is held to jq
# 1.6's outputs by tests/jq_differential.rs.

def @csv:
  if isarray then
    map(
      if isstring then "\"" + gsub("\""; "\"\"") + "\""
      elif isnumber or isboolean then tostring
      elif . == null then ""
      else error("\(type) (\(tojson)) is not valid in a csv row")
      end
    ) | join(",")
  else error("\(type) (\(tojson)) cannot be csv-formatted, only an array can be")
  end;

def @tsv:
  if isarray then
    map(
      if isstring then
        gsub("\\\\"; "\\\\") | gsub("\t"; "\\t") | gsub("\n"; "\\n") | gsub("\r"; "\\r")
      elif isnumber or isboolean then tostring
      elif . == null then ""
      else error("\(type) (\(tojson)) is not valid in a tsv row")
      end
    ) | join("\t")
  else error("\(type) (\(tojson)) cannot be tsv-formatted, only an array can be")
  end;

def IN(s): any(s == .; .);
def IN(src; s): any(src == s; .);

def INDEX(stream; idx_expr):
  reduce stream as $row ({}; .[$row | idx_expr | tostring] = $row);
def INDEX(idx_expr): INDEX(.[]; idx_expr);

def leaf_paths: paths(scalars);

def tostream:
  path(def r: (.[]? | r), .; r) as $p
  | getpath($p)
  | reduce path(.[]?) as $q ([$p, .]; [$p + $q]);

def truncate_stream(stream):
  . as $n | null | stream | . as $input
  | if (.[0] | length) > $n then setpath([0]; .[0][$n:]) else empty end;
