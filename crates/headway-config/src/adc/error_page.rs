//! Error pages: a virtual server's own pages for the errors the proxy answers itself
//! (`[[virtual_server.error_page]]`), read and checked when the config is loaded.

use crate::adc::action::media_type;
use crate::config::{invalid, ConfigError};
use crate::file::{ErrorPageSection, Origin};
use crate::wanopt::{file_error, read_limited, resolve};

/// Largest error page.
pub const MAX_ERROR_PAGE: u64 = 64 * 1024;

/// A page sent instead of the proxy's own text for some statuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The statuses it is for (400–599; no status in two pages of one virtual server).
    pub statuses: Vec<u16>,
    /// The page.
    pub body: String,
    /// Its `Content-Type`.
    pub content_type: String,
}

impl ErrorPage {
    /// The page of `pages` for `status`, if any.
    pub fn find(pages: &[ErrorPage], status: u16) -> Option<&ErrorPage> {
        pages.iter().find(|p| p.statuses.contains(&status))
    }
}

/// Checks a virtual server's error pages (`vs` names it in messages) and reads their files.
pub(crate) fn error_pages(
    sections: &[ErrorPageSection],
    vs: &str,
    origin: &Origin,
) -> Result<Vec<ErrorPage>, ConfigError> {
    let mut pages: Vec<ErrorPage> = Vec::with_capacity(sections.len());
    for s in sections {
        if s.status.get_ref().is_empty() {
            return Err(invalid(
                origin.locate(Some(s.status.span())),
                format!("virtual server `{vs}`: error_page needs statuses such as [502, 503, 504]"),
            ));
        }
        let mut statuses = Vec::with_capacity(s.status.get_ref().len());
        for st in s.status.get_ref() {
            let code = *st.get_ref();
            let at = origin.locate(Some(st.span()));
            if !(400..=599).contains(&code) {
                return Err(invalid(
                    at,
                    format!(
                        "virtual server `{vs}`: error_page status {code} is not an error: use \
                         400–599"
                    ),
                ));
            }
            if statuses.contains(&code) || ErrorPage::find(&pages, code).is_some() {
                return Err(invalid(
                    at,
                    format!("virtual server `{vs}`: status {code} has two error pages: keep one"),
                ));
            }
            statuses.push(code);
        }
        let path = resolve(s.file.get_ref(), origin);
        let body = read_limited(&path, MAX_ERROR_PAGE).map_err(|why| {
            file_error(
                &s.file,
                "an error page",
                &path,
                &why,
                "give a UTF-8 text file of at most 64 KiB (relative paths start at the config \
                 file)",
                origin,
            )
        })?;
        let content_type = media_type(
            &s.content_type,
            "text/html; charset=utf-8",
            &format!("virtual server `{vs}`: error_page"),
            origin,
        )?;
        pages.push(ErrorPage {
            statuses,
            body,
            content_type,
        });
    }
    Ok(pages)
}
