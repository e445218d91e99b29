# What jq 1.6 defines and jaq does not, written in jq over jaq's own
# definitions: the filters a model that knows jq reaches for (tables as CSV
# or TSV, membership, indexing, leaf paths, streams), and deletion as jq
# deletes. Each is held to jq 1.6's outputs by tests/jq_differential.rs.

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

# jaq deletes several paths one after another, in the order given, so that
# an earlier deletion moves the elements a later one names (`del(.[0, 2])`
# deleted the wrong element, or failed). jq deletes them as if all at once;
# so does this: the paths grouped by their parent, the deepest parents
# first (a deletion inside an element never moves the element), each
# parent's keys at once, indices, negative ones and slices read against
# the array before any of them is deleted, as jq reads them. An array is
# rebuilt from the slices between the deleted spans (copied natively); an
# object keeps its other keys' order, as in jq.
def _sluice_delete_keys($keys):
  if type == "array" then
    . as $items
    | length as $n
    | def at: if . < 0 then . + $n else . end;
      [ $keys[]
        | if type == "number" then floor | at | [., . + 1]
          elif type == "object" then [(.start // 0 | at), (.end // $n | at)]
          else error("cannot delete \(tojson) from an array")
          end
        | map(if . < 0 then 0 elif . > $n then $n else . end)
        | select(.[0] < .[1])
      ]
    | sort
    | [foreach (.[], [$n, $n]) as $span ({at: 0, kept: null};
        {at: ([.at, $span[1]] | max), kept: (if $span[0] > .at then [.at, $span[0]] else null end)};
        .kept | values)]
    | [.[] as $kept | $items[$kept[0]:$kept[1]][]]
  elif type == "object" then
    ($keys | map({key: ., value: true}) | from_entries) as $gone
    | with_entries(select($gone[.key] | not))
  else .
  end;

def delpaths($paths):
  if $paths == [] then .
  elif any($paths[]; . == []) then null
  else
    reduce ($paths | unique | group_by(.[:-1]) | reverse[]) as $group (.;
      ($group[0][:-1]) as $parent
      | ($group | map(.[-1])) as $keys
      | if $parent == [] then _sluice_delete_keys($keys)
        elif (getpath($parent) | type) as $t | $t == "array" or $t == "object"
        then getpath($parent) |= _sluice_delete_keys($keys)
        else .
        end)
  end;

# Past 10,000 paths, jaq's own way (`f |= empty`): right for what deletes
# that many (`del(.[] | select(…))`, in one pass: the paths' way took 12.7 s
# over a million items, this 1.1 s, `f |= empty` alone 0.4 s), wrong only
# for as many indices listed or generated (`del(.[range(0; 30000; 2)])`),
# as before.
def del(f):
  [limit(10001; path(f))] as $paths
  | if ($paths | length) <= 10000 then delpaths($paths) else f |= empty end;
