//! SGR colours and attributes as CSS classes for the log view: the only effect an escape
//! sequence may have on the page. Colours map onto the 16 basic ones (256-colour and truecolour
//! to the nearest), attributes onto a few names, so a class string is always built from the
//! fixed tables below and nothing from the input reaches an attribute.

/// Longer SGR parameter lists are ignored rather than applied in part.
const MAX_PARAM_BYTES: usize = 128;

/// Colour names in SGR order; classes are `fg-` / `bg-`, plus `bright-` for indices 8..16.
const COLOURS: [&str; 8] = [
    "black", "red", "green", "yellow", "blue", "magenta", "cyan", "white",
];
/// xterm's default RGB for the 16 basic colours, to map 256-colour and truecolour onto them.
const PALETTE: [u32; 16] = [
    0x000000, 0xcd0000, 0x00cd00, 0xcdcd00, 0x0000ee, 0xcd00cd, 0x00cdcd, 0xe5e5e5, 0x7f7f7f,
    0xff0000, 0x00ff00, 0xffff00, 0x5c5cff, 0xff00ff, 0x00ffff, 0xffffff,
];
/// Attributes: the SGR code that sets one, the code that clears it, its class.
const ATTRS: [(u32, u32, &str); 5] = [
    (1, 22, "bold"),
    (2, 22, "dim"),
    (3, 23, "italic"),
    (4, 24, "underline"),
    (7, 27, "inverse"),
];

/// SGR state: colours are 0..16 (8..16 bright), `attrs` has bit `i` for `ATTRS[i]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Style {
    fg: Option<u8>,
    bg: Option<u8>,
    attrs: u8,
}

impl Style {
    /// The class string: only fixed names, in a fixed order.
    pub fn class(&self) -> String {
        let colours = [("fg-", self.fg), ("bg-", self.bg)]
            .into_iter()
            .filter_map(|(side, c)| {
                let c = usize::from(c?);
                let bright = if c >= 8 { "bright-" } else { "" };
                Some(format!("{side}{bright}{}", COLOURS[c % 8]))
            });
        let attrs = (ATTRS.iter().enumerate())
            .filter(|(i, _)| self.attrs & (1 << i) != 0)
            .map(|(_, a)| a.2.to_owned());
        colours.chain(attrs).collect::<Vec<_>>().join(" ")
    }

    /// Applies the parameters of one `ESC [ ... m` (digits and `;` only; colon sub-parameters
    /// and private markers make the whole sequence ignored).
    pub fn apply_sgr(&mut self, params: &[u8]) {
        let plain = params.iter().all(|&b| b == b';' || b.is_ascii_digit());
        if !plain || params.len() > MAX_PARAM_BYTES {
            return;
        }
        let mut codes = params.split(|&b| b == b';').map(|p| {
            // Empty means 0; overlong values saturate and match no code.
            (p.iter()).fold(0u32, |n, &d| {
                n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
            })
        });
        while let Some(code) = codes.next() {
            if code != 38 && code != 48 {
                self.apply_code(code);
                continue;
            }
            let colour = match codes.next() {
                Some(5) => codes.next().and_then(indexed),
                Some(2) => match (codes.next(), codes.next(), codes.next()) {
                    (Some(r), Some(g), Some(b)) => Some(nearest(r, g, b)),
                    _ => None,
                },
                // Unknown colour mode: the rest cannot be parsed reliably.
                _ => return,
            };
            // An unmappable colour changes nothing.
            if code == 38 {
                self.fg = colour.or(self.fg);
            } else {
                self.bg = colour.or(self.bg);
            }
        }
    }

    /// Applies one SGR code other than 38/48; unknown codes change nothing.
    fn apply_code(&mut self, code: u32) {
        match code {
            0 => *self = Style::default(),
            30..=37 => self.fg = Some((code - 30) as u8),
            39 => self.fg = None,
            40..=47 => self.bg = Some((code - 40) as u8),
            49 => self.bg = None,
            90..=97 => self.fg = Some((code - 90 + 8) as u8),
            100..=107 => self.bg = Some((code - 100 + 8) as u8),
            _ => {
                for (i, &(on, off, _)) in ATTRS.iter().enumerate() {
                    if code == on {
                        self.attrs |= 1 << i;
                    } else if code == off {
                        self.attrs &= !(1 << i);
                    }
                }
            }
        }
    }
}

/// One of the 256 indexed colours as the nearest basic colour.
fn indexed(n: u32) -> Option<u8> {
    const LEVELS: [u32; 6] = [0, 95, 135, 175, 215, 255];
    match n {
        0..=15 => Some(n as u8),
        16..=231 => {
            let i = (n - 16) as usize;
            Some(nearest(LEVELS[i / 36], LEVELS[i / 6 % 6], LEVELS[i % 6]))
        }
        232..=255 => {
            let grey = 8 + 10 * (n - 232);
            Some(nearest(grey, grey, grey))
        }
        _ => None,
    }
}

/// The basic colour closest to an RGB value (components above 255 count as 255).
fn nearest(r: u32, g: u32, b: u32) -> u8 {
    let dist = |rgb: u32| {
        let d =
            |shift: u32, v: u32| (i64::from((rgb >> shift) & 0xff) - i64::from(v.min(255))).pow(2);
        d(16, r) + d(8, g) + d(0, b)
    };
    (0..16u8)
        .min_by_key(|&i| dist(PALETTE[usize::from(i)]))
        .unwrap_or(0)
}
