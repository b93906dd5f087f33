//! Reads the kernel entries of a PTX module: each `.entry NAME(params)` with its parameters'
//! sizes and kinds, which is all the fake needs to marshal `cuLaunchKernel`'s `kernelParams`
//! for the kernel's host build. The instructions themselves are not read: the host build runs
//! instead.

/// What a kernel parameter is, as far as passing it to the host build goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// An integer or pointer (`.u64`, `.s32`, `.b8`, ...): passed in an integer register.
    Integer {
        /// Size in bytes (1, 2, 4 or 8).
        bytes: usize,
        /// Whether it is signed (`.s*`): sign-extended to 64 bits.
        signed: bool,
    },
    /// `.f32`/`.f64`: not supported by the fake's launcher.
    Float {
        /// Size in bytes.
        bytes: usize,
    },
    /// A by-value struct (`.align A .b8 name[N]`).
    Bytes {
        /// Size in bytes.
        bytes: usize,
        /// Its alignment.
        align: usize,
    },
}

impl ParamKind {
    /// The parameter's size in bytes.
    pub fn size(self) -> usize {
        match self {
            ParamKind::Integer { bytes, .. }
            | ParamKind::Float { bytes }
            | ParamKind::Bytes { bytes, .. } => bytes,
        }
    }
}

/// One kernel of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The kernel's name (its `extern "C"` name in the source).
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<ParamKind>,
}

/// The kernel entries of `ptx`, in order. `Err` says what could not be read.
pub fn entries(ptx: &str) -> Result<Vec<Entry>, String> {
    let text = strip_comments(ptx);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = find_directive(rest, ".entry") {
        rest = &rest[at + ".entry".len()..];
        let open = rest.find('(').ok_or("an .entry without a parameter list")?;
        let name = rest[..open].trim().to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || "_$.".contains(c))
        {
            return Err(format!("an .entry with the unreadable name `{name}`"));
        }
        let close = rest[open..]
            .find(')')
            .ok_or_else(|| format!(".entry {name}: its parameter list does not end"))?
            + open;
        let list = &rest[open + 1..close];
        let mut params = Vec::new();
        for param in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            params.push(parse_param(param).map_err(|e| format!(".entry {name}: {e}"))?);
        }
        out.push(Entry { name, params });
        rest = &rest[close..];
    }
    Ok(out)
}

/// `.entry` as a directive (not inside a longer word such as `.entry_x`).
fn find_directive(text: &str, directive: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(directive) {
        let at = from + at;
        let after = text[at + directive.len()..].chars().next();
        if after.is_some_and(char::is_whitespace) {
            return Some(at);
        }
        from = at + directive.len();
    }
    None
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        let line_first = match (line, block) {
            (None, None) => {
                out.push_str(rest);
                return out;
            }
            (Some(l), Some(b)) => l < b,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if line_first {
            let l = line.unwrap_or_default();
            out.push_str(&rest[..l]);
            rest = rest[l..].find('\n').map_or("", |e| &rest[l + e..]);
        } else {
            let b = block.unwrap_or_default();
            out.push_str(&rest[..b]);
            rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
        }
    }
}

/// `.param .u64 name`, `.param .align 8 .b8 name[416]`, `.param .u64 .ptr .global .align 4 name`.
fn parse_param(param: &str) -> Result<ParamKind, String> {
    let tokens: Vec<&str> = param.split_whitespace().collect();
    if tokens.first() != Some(&".param") {
        return Err(format!("parameter `{param}` does not start with .param"));
    }
    let mut align = None;
    let mut ty = None;
    let mut i = 1;
    while i < tokens.len() {
        match tokens[i] {
            ".align" => {
                let value = tokens.get(i + 1).and_then(|v| v.parse::<usize>().ok());
                // The first .align is the parameter's; one after `.ptr` is the pointee's.
                if ty.is_none() {
                    align = value;
                }
                i += 2;
                continue;
            }
            ".ptr" | ".global" | ".const" | ".local" | ".shared" => {}
            t if t.starts_with('.') => ty = Some(t),
            _ => break,
        }
        i += 1;
    }
    let ty = ty.ok_or_else(|| format!("parameter `{param}` has no type"))?;
    let name = tokens
        .get(i)
        .ok_or_else(|| format!("parameter `{param}` has no name"))?;
    let element = match &ty[1..] {
        "u8" | "s8" | "b8" | "pred" => 1,
        "u16" | "s16" | "b16" | "f16" => 2,
        "u32" | "s32" | "b32" | "f32" => 4,
        "u64" | "s64" | "b64" | "f64" => 8,
        other => return Err(format!("parameter `{param}` has the unknown type .{other}")),
    };
    if let Some(open) = name.find('[') {
        let count: usize = name[open + 1..]
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("parameter `{param}` has an unreadable array size"))?;
        return Ok(ParamKind::Bytes {
            bytes: element * count,
            align: align.unwrap_or(element),
        });
    }
    Ok(if ty.starts_with(".f") {
        ParamKind::Float { bytes: element }
    } else {
        ParamKind::Integer {
            bytes: element,
            signed: ty.starts_with(".s"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_struct_parameters_and_hand_written_scalars_are_read() {
        let ptx = r#"
// Generated by NVIDIA NVVM Compiler
// .entry commented_out(
.version 8.7
.target sm_52
.address_size 64

	// .globl	vg_map
.visible .entry vg_map(
	.param .align 8 .b8 vg_map_param_0[416]
)
{
	ret;
}
/* .entry also_commented(.param .u64 x) */
.visible .entry slow_fill(
    .param .u64 slow_fill_buf,
    .param .u32 slow_fill_n,
    .param .s32 slow_fill_value,
    .param .u64 .ptr .global .align 4 slow_fill_spins
)
{
    ret;
}
.entry fault(.param .f32 fault_p)
{ ret; }
"#;
        let e = entries(ptx).unwrap();
        let names: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["vg_map", "slow_fill", "fault"]);
        assert_eq!(
            e[0].params,
            [ParamKind::Bytes {
                bytes: 416,
                align: 8
            }]
        );
        assert_eq!(
            e[1].params,
            [
                ParamKind::Integer {
                    bytes: 8,
                    signed: false
                },
                ParamKind::Integer {
                    bytes: 4,
                    signed: false
                },
                ParamKind::Integer {
                    bytes: 4,
                    signed: true
                },
                ParamKind::Integer {
                    bytes: 8,
                    signed: false
                },
            ]
        );
        assert_eq!(e[2].params, [ParamKind::Float { bytes: 4 }]);
    }

    #[test]
    fn unreadable_entries_are_errors() {
        assert!(entries(".entry k(.param .u64 x").is_err());
        assert!(entries(".entry k(.param .q64 x)").is_err());
        assert!(entries(".entry k(.param .b8 x[huge])").is_err());
        assert!(entries(".entry (.param .u64 x)").is_err());
        assert_eq!(entries(".version 7.0\n.target sm_52").unwrap(), vec![]);
    }
}
